"""Host memory that an async checkpoint needs, checked before the first async save.

An async save copies each rank's whole state (weights, AdamW moments) into host memory, kept for
the run (trainer/checkpoint.py reuses the buffers): for Llama-3 8B that is 96 GB per node, whatever
the number of ranks. If the checkpoint folder is itself in RAM (tmpfs such as /dev/shm, ramfs), the
files take as much again. When the node cannot hold that, the kernel's out-of-memory killer ends
the ranks mid-run (seen on 2 x H200 with a full 8B checkpoint in /dev/shm), so the run falls back
to blocking saves instead, with a warning that says why.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from typing import Any, Iterator

import torch
from torch.distributed.tensor import DTensor

RAM_FILESYSTEMS = frozenset({"tmpfs", "ramfs"})
# Left free beyond the estimate: page cache the writer needs, the ranks' own growth, other processes.
HEADROOM_FRACTION = 0.10
HEADROOM_BYTES = 4 * 10**9


def mem_available(meminfo: str | Path = "/proc/meminfo") -> int | None:
    """MemAvailable of the node in bytes, or None where the kernel does not report it."""
    try:
        text = Path(meminfo).read_text()
    except OSError:
        return None
    for line in text.splitlines():
        if line.startswith("MemAvailable:"):
            parts = line.split()
            return int(parts[1]) * (1024 if len(parts) > 2 and parts[2] == "kB" else 1)
    return None


def mount_of(path: str | Path, mounts: str | Path = "/proc/mounts") -> tuple[str, str, str] | None:
    """(mount point, filesystem type, device) holding `path`: the longest mount point above it.
    None off Linux (no /proc/mounts) or when nothing matches."""
    target = os.path.realpath(path)
    try:
        lines = Path(mounts).read_text().splitlines()
    except OSError:
        return None
    best = None
    for line in lines:
        fields = line.split()
        if len(fields) < 3:
            continue
        # /proc/mounts escapes spaces in mount points as \040.
        point = fields[1].replace("\\040", " ")
        inside = target == point or target.startswith(point.rstrip("/") + "/")
        if inside and (best is None or len(point) >= len(best[0])):
            best = (point, fields[2], fields[0])
    return best


def filesystem_type(path: str | Path, mounts: str | Path = "/proc/mounts") -> str | None:
    """Type of the filesystem holding `path`, or None."""
    mount = mount_of(path, mounts)
    return None if mount is None else mount[1]


def _tensors(state: Any) -> Iterator[torch.Tensor]:
    """Every tensor of a (nested) state dict, DTensors as their local shard."""
    if isinstance(state, DTensor):
        yield state.to_local()
    elif isinstance(state, torch.Tensor):
        yield state
    elif isinstance(state, dict):
        for v in state.values():
            yield from _tensors(v)
    elif isinstance(state, (list, tuple)):
        for v in state:
            yield from _tensors(v)


def state_bytes(state: Any) -> int:
    """Bytes of this rank's tensors in a (nested) state dict: DTensors count their local shard."""
    return sum(t.nbytes for t in _tensors(state))


def async_shortfall(rank_bytes: int, local_ranks: int, available: int | None,
                    folder_in_ram: bool) -> str | None:
    """Why this node cannot stage an async save (None if it can, or if memory is unknown).

    rank_bytes: this rank's state; every rank on the node stages at the same time, so the node needs
    rank_bytes x local_ranks, twice if the checkpoint files also land in RAM, plus headroom.
    """
    if available is None:
        return None
    node = rank_bytes * local_ranks
    need = node * (2 if folder_in_ram else 1)
    need += int(HEADROOM_FRACTION * need) + HEADROOM_BYTES
    if need <= available:
        return None
    gb = 1e9
    what = (f"{node / gb:.1f} GB of host staging for {local_ranks} rank(s)"
            + (f" + {node / gb:.1f} GB for the files in the RAM-backed checkpoint folder"
               if folder_in_ram else ""))
    return (f"an async save needs {what} + headroom = {need / gb:.1f} GB, but the node has "
            f"{available / gb:.1f} GB available")


SHM_FOLDER = "/dev/shm"


def storage_count(state: Any) -> int:
    """Tensors in a (nested) state dict: each becomes one shared-memory file, held open by the
    training process for the run, when a writer process stages it (trainer/checkpoint.py)."""
    return sum(1 for _ in _tensors(state))


def shm_free(folder: str = SHM_FOLDER) -> int | None:
    """Free bytes of the shared-memory filesystem, or None where there is none (not Linux)."""
    try:
        return shutil.disk_usage(folder).free
    except OSError:
        return None


def raise_open_file_limit() -> int | None:
    """Raise this process's soft limit on open files to the hard limit (where allowed) and return
    the soft limit now in force; None where resource limits do not exist or are unlimited."""
    try:
        import resource
    except ImportError:
        return None
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != hard:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
            soft = hard
        except (ValueError, OSError):
            pass
    return None if soft == resource.RLIM_INFINITY else soft


def writer_process_shortfall(rank_bytes: int, local_ranks: int, free_shm: int | None,
                             storages: int, fd_limit: int | None, open_fds: int) -> str | None:
    """Why a writer process cannot take this rank's async saves (None if it can).

    It reads the staged copy from shared memory: every rank of the node stages into the shared-memory
    filesystem at once, and each staged tensor keeps one file descriptor open in the training
    process. Containers often mount a small /dev/shm (Docker's default is 64 MB) or limit open files.
    """
    gb = 1e9
    if free_shm is None:
        return f"there is no shared-memory filesystem at {SHM_FOLDER}"
    node = rank_bytes * local_ranks
    need = node + int(HEADROOM_FRACTION * node)
    if need > free_shm:
        return (f"the staged copies of {local_ranks} rank(s) need {need / gb:.1f} GB in {SHM_FOLDER}, "
                f"which has {free_shm / gb:.1f} GB free (e.g. docker run --shm-size, or a larger tmpfs)")
    # Headroom for the files, sockets and CUDA handles the run opens after the first save.
    spare = 256
    if fd_limit is not None and open_fds + storages + spare > fd_limit:
        return (f"staging {storages} tensors keeps {storages} files open, and with the {open_fds} already "
                f"open that passes the open-file limit of {fd_limit} (raise it with ulimit -n)")
    return None
