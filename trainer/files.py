"""Atomic file replacement (the shard writer, the checkpoint records, the run folder) and exclusive
file locks: file_lock (the embedded corpus cache, scripts/prepare_data.py) and try_flock, the one
non-blocking attempt both it and the run-folder lock (trainer/run_lock.py) make."""

from __future__ import annotations

import errno
import os
import time
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Callable, Iterator


def atomic_write(path: Path, write: Callable[[IO[bytes]], object]) -> None:
    """Write through `write(file)` to a temp name beside `path`, fsync, rename over `path`, then
    fsync the folder (best effort), so that a crash leaves the old file or the new one, never half."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            write(f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if tmp.exists():
            tmp.unlink()
    try:
        fd = os.open(path.parent, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)  # the rename itself survives a crash of the node
    except OSError:
        pass  # some file systems cannot fsync a folder
    finally:
        os.close(fd)


# flock errors that mean "this file system cannot lock" (some NFS mounts, Lustre without -o flock,
# FUSE file systems), not "another process holds it".
_FLOCK_UNSUPPORTED = frozenset({errno.ENOLCK, errno.EOPNOTSUPP, errno.ENOTSUP, errno.ENOSYS, errno.EINVAL})
# Linux says EWOULDBLOCK; where Python emulates flock with fcntl, a held lock reads EACCES/EAGAIN.
_FLOCK_BUSY = frozenset({errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES})


class FlockUnsupported(OSError):
    """The file system cannot lock this file (the OSError flock raised is the cause)."""


def try_flock(fd: int) -> bool:
    """One non-blocking exclusive flock on `fd`: True taken, False held by another process.
    Raises FlockUnsupported where the file system cannot lock, any other OSError as it came."""
    import fcntl

    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        return True
    except OSError as e:
        if e.errno in _FLOCK_BUSY:
            return False
        if e.errno in _FLOCK_UNSUPPORTED:
            raise FlockUnsupported(e.errno, e.strerror) from e
        raise


@contextmanager
def file_lock(lock_path: Path, timeout_s: float, who: str, busy: str = "") -> Iterator[None]:
    """Exclusive flock on `lock_path`, polled until `timeout_s` (0: one try), then TimeoutError(busy);
    released on exit or when the holder dies. A file system that refuses locks gets a warning naming
    `who`, and the body runs without a lock."""
    import fcntl

    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
    locked = False
    try:
        deadline = time.monotonic() + timeout_s
        while True:
            try:
                if try_flock(fd):
                    locked = True
                    break
            except FlockUnsupported as e:
                warnings.warn(f"{who}: cannot lock {lock_path} ({e}); going on without a lock")
                break
            if time.monotonic() > deadline:
                raise TimeoutError(busy or f"{who}: {lock_path} is locked by another process")
            time.sleep(0.1)
        yield
    finally:
        if locked:
            fcntl.flock(fd, fcntl.LOCK_UN)
        os.close(fd)
