"""Atomic file replacement, shared by the shard writer, the checkpoint records and the run folder."""

from __future__ import annotations

import os
from pathlib import Path
from typing import IO, Callable


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
