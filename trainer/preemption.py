"""Preemption: SIGTERM or SIGUSR1 make every rank finish its step, save, and exit 0. So does a
first Ctrl-C (SIGINT) once training runs; a second one, or one during start-up, stops at once.

A signal handler may run between any two bytecodes, so it only records the signal. At the end of
each step all ranks agree on it with one tiny all_reduce(MAX) (a CPU int on a gloo-capable group:
microseconds on one host, about a millisecond across nodes), so ranks that got the signal at
different moments -- or not at all (a launcher may signal only its own node's ranks) -- stop after
the same step. A rank that gets it twice (from Slurm and again from scripts/train.sh) records the
first: it saves once.

torchrun starts each worker in its own session and forwards SIGTERM to them when it gets one, but
then exits non-zero itself, and SIGUSR1 kills it; scripts/train.sh therefore starts torchrun with
SIGUSR1 ignored, traps both signals and forwards them to the workers directly, so that the launcher
exits 0 once they have saved. The workers inherit the ignored SIGUSR1; installing the handler here
replaces it. trainer/train.py installs it before reading the config, so a signal during start-up
(minutes for a large model) is recorded, and the Trainer stops before its first step.

With checkpoint.enable = false nothing can be saved: the trainer still watches (a
PreemptionWatcher of its own) and calls exit_unsaved(), which says so on rank 0 and exits every rank
with 128 + the signal number. A non-zero status tells Slurm (and `afterok` dependencies or requeue
scripts) that the job did not finish and left nothing to continue from.

Ctrl-C: interactive users stop a run with it, and Python's default (a KeyboardInterrupt wherever the
main thread is, on every rank) printed a traceback per rank and lost every step since the last
checkpoint. Once the loop runs, the first SIGINT is a stop request like a preemption (the first rank
of each node says so at once); a second raises KeyboardInterrupt, which trainer/train.py turns into one line
and exit status 130 without waiting for a checkpoint write in flight. During start-up there is
nothing to save, so a SIGINT raises at once. scripts/train.sh forwards the terminal's SIGINT to the
ranks itself (torchrun, which would SIGKILL them 30 s later, ignores it there).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from types import FrameType
from typing import TYPE_CHECKING, NoReturn

from trainer.log import logger

# torch is imported where it is used: trainer/train.py installs the watcher before anything else,
# and importing torch first would leave a second or more of start-up unwatched.
if TYPE_CHECKING:
    import torch.distributed as dist

PREEMPTION_SIGNALS = (signal.SIGTERM, signal.SIGUSR1)
WATCHED_SIGNALS = (*PREEMPTION_SIGNALS, signal.SIGINT)


def stop_label(signum: int) -> str:
    """How the logs name what stopped the run."""
    return "Ctrl-C" if signum == signal.SIGINT else "preemption signal"


class PreemptionWatcher:
    """Records SIGTERM / SIGUSR1 (and a first SIGINT while training); `agreed()` says (collectively)
    whether any rank received one."""

    def __init__(self, group: dist.ProcessGroup | None = None):
        self.group = group
        self.received: int | None = None  # the first signal number seen
        self.agreed_signal = 0  # set by agreed(): the highest signal number any rank received
        self.interrupts = 0  # SIGINTs seen
        # Set by the Trainer when its loop starts: before that a SIGINT raises KeyboardInterrupt at
        # once (nothing to save), after it the first is a stop request; `saves` is what it promises.
        self.training = False
        self.saves = True
        self._previous: dict[int, object] = {}
        if threading.current_thread() is not threading.main_thread():
            logger.warning("checkpoint: not in the main thread, so SIGTERM/SIGUSR1 cannot be "
                           "handled; a preemption will kill this run without a final checkpoint")
            return
        for sig in WATCHED_SIGNALS:
            self._previous[sig] = signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if signum == signal.SIGINT:
            self.interrupts += 1
            if self.interrupts > 1 or not self.training:
                raise KeyboardInterrupt
            say_once_per_node(
                "Ctrl-C: stopping after this step" + (", once it is saved" if self.saves else
                                                      " (checkpoint.enable is false: nothing is saved)")
                + "; Ctrl-C again stops at once" + (", unsaved" if self.saves else ""))
        if self.received is None:
            self.received = signum

    def agreed(self) -> bool:
        """True on every rank when any rank has received a preemption signal (a collective)."""
        import torch
        import torch.distributed as dist

        # The signal number itself is reduced, so that every rank knows one (for exit_unsaved).
        flag = torch.tensor([self.received or 0], dtype=torch.int32)
        if dist.is_initialized() and dist.get_world_size(self.group) > 1:
            dist.all_reduce(flag, op=dist.ReduceOp.MAX, group=self.group)
        self.agreed_signal = int(flag.item())
        return self.agreed_signal != 0

    def exit_unsaved(self, step: int, during_startup: bool = False) -> NoReturn:
        """After agreed() with checkpoint.enable = false: warn on rank 0, exit 128 + the signal.
        `during_startup`: the signal came before this launch's first step, so it trained nothing."""
        import torch.distributed as dist

        sig = signal.Signals(self.agreed_signal)
        status = 128 + sig.value
        if not dist.is_initialized() or dist.get_rank() == 0:
            when = (f"during start-up, before step {step + 1}: this launch trained nothing and"
                    if during_startup else f"after step {step}: nothing is saved because")
            logger.warning(f"{stop_label(sig)} ({sig.name}) {when} checkpoint.enable is false; "
                           f"exiting with status {status}: the job did not finish (set "
                           f"checkpoint.enable = true to save the current step on preemption)")
        raise SystemExit(status)

    def close(self) -> None:
        """Restore the handlers that were installed before."""
        for sig, previous in self._previous.items():
            signal.signal(sig, previous)
        self._previous.clear()


def _say(message: str) -> None:
    """`[rankN] message` on stderr in one write (safe in a signal handler: the logging module takes
    locks the interrupted code may hold)."""
    os.write(2, f"[rank{os.environ.get('RANK', '0')}] {message}\n".encode())


def say_once_per_node(message: str) -> None:
    """_say from each node's first rank only."""
    if os.environ.get("LOCAL_RANK", "0") == "0":
        _say(message)


PR_SET_PDEATHSIG = 1  # linux/prctl.h


def end_with_the_launcher() -> None:
    """Under torchrun on Linux: this rank is killed when its torchrun exits first.

    torchrun normally outlives its ranks (it waits for them, or stops them, before it exits). But a
    torchrun killed outright, or one stopped (scripts/train.sh's SIGTERM to a restart after a
    preemption) while it was starting a new group, leaves ranks behind, reparented, in start-up:
    waiting for the rest of a group that never comes until comm.init_timeout_seconds, holding their
    GPUs. The kernel's parent-death signal ends them with it. A parent that is already gone before
    the signal was set (scripts/train.sh names its torchrun's pid) ends this rank at once.
    """
    if not sys.platform.startswith("linux") or "TORCHELASTIC_RUN_ID" not in os.environ:
        return
    import ctypes

    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, int(signal.SIGKILL), 0, 0, 0)
    except (OSError, AttributeError):  # no prctl (another libc): nothing to do
        return
    launcher = os.environ.get("TITANKIT_LAUNCHER_PID", "")
    if launcher.isdigit() and os.getppid() != int(launcher):
        _say(f"error: its torchrun (pid {launcher}) has exited; stopping")
        os._exit(1)
