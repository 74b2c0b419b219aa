"""The project logger: rank 0 logs INFO, other ranks only warnings, so a 64-rank log stays readable."""

from __future__ import annotations

import logging
import os
import sys

logger = logging.getLogger("titankit")


class _StderrHandler(logging.StreamHandler):
    """Writes to the sys.stderr of the moment. A StreamHandler keeps the stream it was made with,
    and when that was a temporary one (pytest's capture, a notebook cell's redirect), every later
    record fails with "I/O operation on closed file"."""

    @property
    def stream(self):  # type: ignore[override]
        return sys.stderr

    @stream.setter
    def stream(self, value) -> None:
        pass


def init_logging(rank: int | None = None) -> None:
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    if logger.handlers:
        return
    handler = _StderrHandler()
    handler.setFormatter(logging.Formatter(f"[rank{rank}] %(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    # The kernel package logs under "kernels" (it does not depend on the trainer): its records get
    # the same rank prefix and per-rank level instead of Python's bare last-resort output.
    for log in (logger, logging.getLogger("kernels")):
        log.addHandler(handler)
        log.setLevel(logging.INFO if rank == 0 else logging.WARNING)
        log.propagate = False
