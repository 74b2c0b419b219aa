"""Preemption: SIGTERM or SIGUSR1 make every rank finish its step, save, and exit 0.

A signal handler may run between any two bytecodes, so it only records the signal. At the end of
each step all ranks agree on it with one tiny all_reduce(MAX) (a CPU int on a gloo-capable group:
microseconds on one host, about a millisecond across nodes), so ranks that got the signal at
different moments -- or not at all (torchrun forwards it to its own workers only) -- stop after
the same step.

torchrun starts each worker in its own session and forwards SIGTERM to them when it gets one, but
then exits non-zero itself; scripts/train.sh therefore traps the signal and forwards it to the
workers directly, so that the launcher exits 0 once they have saved.
"""

from __future__ import annotations

import signal
import threading
from types import FrameType

import torch
import torch.distributed as dist

from trainer.log import logger

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)


class PreemptionWatcher:
    """Records SIGTERM / SIGUSR1; `agreed()` says (collectively) whether any rank received one."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        self.group = group
        self.received: int | None = None  # the first signal number seen
        self._previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            logger.warning("checkpoint: not in the main thread, so SIGTERM/SIGUSR1 cannot be "
                           "handled; a preemption will kill this run without a final checkpoint")
            return
        for sig in PREEMPTION_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.received is None:
            self.received = signum

    def agreed(self) -> bool:
        """True on every rank when any rank has received a preemption signal (a collective)."""
        flag = torch.tensor([0 if self.received is None else 1], dtype=torch.int32)
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        return bool(flag.item())

    def close(self) -> None:
        """Restore the handlers that were installed before."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()
