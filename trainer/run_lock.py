"""One launch per run folder: global rank 0 holds an exclusive lock on {run folder}/.titankit.lock for
the life of its process.

Two launches into one run folder (a Slurm job submitted twice, a relaunch while the old job still
runs) both trained: the second resumed from the first's checkpoint in progress, set the first's
newer steps aside as step-N.superseded and interleaved its rows into metrics.jsonl. With this lock
the second launch stops on every rank before it reads or writes anything in the folder, and says
which process holds it.

Why flock(2): the kernel drops the lock when the last descriptor of the open file goes away, so a
rank 0 that exits, crashes or is SIGKILLed (torchrun --max-restarts then starts the next attempt)
leaves nothing stale to clean up; a pid file alone cannot tell a dead holder from a live one on
another node. flock, not fcntl/lockf: POSIX locks belong to the process and vanish when *any* of
its descriptors of the file is closed. (On NFS, Linux emulates flock with POSIX locks, so there a
second open of the file by the holding process itself would not be refused.)

The file is never deleted or replaced by a rename: the lock lives on its inode, and a new file
beside a locked one would lock nothing. Its content is the last holder's identity (JSON), read only
after a refused flock, to name the holder in the error.
"""

from __future__ import annotations

import json
import os
import shlex
import socket
import sys
import time
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from trainer.files import FlockUnsupported, try_flock
from trainer.log import logger

LOCK_NAME = ".titankit.lock"
_HOLDER_WAIT_S = 1.0  # the holder writes its identity right after locking: give it that long

# Descriptors of locks this process holds (not a forked child's: _close_in_child empties it).
_held_fds: set[int] = set()


def _close_in_child() -> None:
    # A forked child shares the open file, and with it the lock: were it to outlive rank 0 (a
    # worker that lingers), the next launch or torchrun restart would be refused by a dead rank 0.
    # Close the child's copy only; flock(LOCK_UN) here would unlock the parent's lock as well.
    # Children that exec (subprocess, multiprocessing "spawn"/"forkserver", which DCP's writer
    # process uses) lose the descriptor anyway: os.open makes it close-on-exec (PEP 446).
    for fd in list(_held_fds):
        try:
            os.close(fd)
        except OSError:
            pass
    _held_fds.clear()


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_close_in_child)


class RunFolderInUse(RuntimeError):
    """Another live process holds the run folder's lock."""


@dataclass
class RunLock:
    """Rank 0's hold on a run folder. `fd` is None when the file system cannot lock (`reason`)."""

    path: Path
    fd: int | None
    reason: str = ""

    @property
    def locked(self) -> bool:
        return self.fd is not None

    def release(self) -> None:
        """Unlock (idempotent). Call it last when the run ends; process exit does it too."""
        fd, self.fd = self.fd, None
        if fd is None or fd not in _held_fds:
            return  # in a forked child, _close_in_child closed it: the number may be reused now
        _held_fds.discard(fd)
        try:
            os.close(fd)  # the last descriptor of the open file: the kernel drops the lock
        except OSError:
            pass

    def __del__(self) -> None:
        # A Trainer that failed half-built in a long-lived process (a test, a notebook) must not
        # keep the folder locked until that process exits.
        self.release()


def holder_identity() -> dict[str, Any]:
    """Who this process is, as the refused launch will quote it."""
    return {
        "host": socket.gethostname(),
        "pid": os.getpid(),
        "since_utc": datetime.now(timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC"),
        # orig_argv: the interpreter and its flags too (`python -m trainer.train --config ...`).
        "command": shlex.join(getattr(sys, "orig_argv", sys.argv)),
        "slurm_job": os.environ.get("SLURM_JOB_ID", ""),
    }


def _read_holder(path: Path) -> dict[str, Any] | None:
    """The holder's identity, or None when it has not written one (yet) or it is unreadable."""
    deadline = time.monotonic() + _HOLDER_WAIT_S
    while True:
        try:
            holder = json.loads(path.read_text())
            if isinstance(holder, dict) and "pid" in holder:
                return holder
        except (OSError, ValueError):
            pass
        if time.monotonic() > deadline:
            return None
        time.sleep(0.05)


def _in_use_message(run_dir: Path, path: Path) -> str:
    holder = _read_holder(path)
    if holder is None:
        who = f"its holder has not written who it is into {path}"
    else:
        who = f"pid {holder.get('pid')} on host {holder.get('host')} since {holder.get('since_utc')}"
        if holder.get("slurm_job"):
            who += f", Slurm job {holder['slurm_job']}"
        who += f": {holder.get('command')}"
        if holder.get("pid") == os.getpid() and holder.get("host") == socket.gethostname():
            who += "; that is this process: an earlier Trainer on this folder was not closed"
    return (f"run folder {run_dir} is in use by another launch ({who}); wait for it to end, stop "
            f"it, or set another run.name. The lock ({path}) goes away with its holder's process: "
            "deleting the file would let both launches write into the folder")


def acquire_run_lock(run_dir: Path | str) -> RunLock:
    """Lock `run_dir` (which must exist) for this process and record who holds it. Local: no
    collective; lock_run_folder is the call for a process group.

    Raises RunFolderInUse naming the holder. On a file system that cannot lock, warns and returns
    an unlocked RunLock: the run goes on unguarded, as it did before this lock existed."""
    run_dir = Path(run_dir)
    path = run_dir / LOCK_NAME
    fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        taken = try_flock(fd)
    except OSError as exc:
        os.close(fd)
        if isinstance(exc, FlockUnsupported):
            reason = f"{path}: {exc.strerror or exc}"
            logger.warning(f"run folder {run_dir} cannot be locked on this file system ({reason}); "
                           "a second launch into it would not be refused, so make sure only one "
                           "job uses this run.name at a time")
            return RunLock(path, None, reason)
        raise
    if not taken:
        os.close(fd)  # our own descriptor: closing it leaves the holder's lock alone
        raise RunFolderInUse(_in_use_message(run_dir, path))
    _held_fds.add(fd)
    lock = RunLock(path, fd)
    data = (json.dumps(holder_identity(), indent=1) + "\n").encode()
    try:
        # In place through the locked descriptor (see the module note): truncate the last holder's.
        os.ftruncate(fd, 0)
        os.pwrite(fd, data, 0)
        os.fsync(fd)  # another node's launch reads it over a shared file system
    except OSError as exc:
        logger.warning(f"run folder lock {path}: could not record this launch in it ({exc}); the "
                       "folder is locked, but a refused launch cannot say by whom")
    return lock


def make_run_folder(run_dir: Path) -> None:
    """{run.dump_folder}/{run.name}, or an error naming those keys (not a bare OSError traceback)."""
    try:
        run_dir.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ValueError(f"run.dump_folder / run.name: cannot create the run folder {run_dir} "
                         f"({exc.strerror or exc}); choose a writable run.dump_folder") from exc


def lock_run_folder(run_dir: Path | str, rank: int, group: Any = None) -> RunLock | None:
    """Collective, on every rank: global rank 0 creates `run_dir` (make_run_folder) and takes the
    lock, in one exchange with the other ranks, which get its error if either fails.

    Returns rank 0's RunLock (None on the other ranks); keep it for the run, release() it last.
    If another launch holds the folder, every rank raises RuntimeError with rank 0's message
    (RunFolderInUse's), instead of the other ranks waiting in their next collective."""
    from trainer.distributed import on_rank0

    held: list[RunLock] = []
    def make_and_lock() -> None:
        make_run_folder(Path(run_dir))
        held.append(acquire_run_lock(run_dir))

    on_rank0(make_and_lock, rank, group)
    return held[0] if held else None
