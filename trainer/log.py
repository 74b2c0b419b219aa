"""The project logger: rank 0 logs INFO, other ranks only warnings, so a 64-rank log stays readable."""

from __future__ import annotations

import logging
import os

logger = logging.getLogger("titankit")


def init_logging(rank: int | None = None) -> None:
    rank = int(os.environ.get("RANK", "0")) if rank is None else rank
    if logger.handlers:
        return
    handler = logging.StreamHandler()
    handler.setFormatter(logging.Formatter(f"[rank{rank}] %(asctime)s %(levelname)s %(message)s", "%H:%M:%S"))
    logger.addHandler(handler)
    logger.setLevel(logging.INFO if rank == 0 else logging.WARNING)
    logger.propagate = False
