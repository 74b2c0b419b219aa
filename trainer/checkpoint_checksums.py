"""CRC32 checksums of a step folder's files: recorded by each rank as part of its save
(RecordingWriter), checked by all ranks together before a load reads the folder (verify_step;
trainer/checkpoint.py calls both), and offline by trainer/checkpoint_verify.py.

The completeness check (trainer/checkpoint_folders.py) finds a missing or short shard, but not bytes
changed in place (bit rot, a bad copy): DCP then loads wrong numbers, or fails deep inside with an
error that names no file. So each rank records the files it wrote, those DCP names
`__{rank}_{i}.distcp` (rank 0 adds `.metadata`), in `step-N/.checksums/rank-{rank}.json`:

    {"version": 1, "algorithm": "crc32", "rank": 0, "seconds": 0.02,
     "files": {".metadata": {"bytes": 5120, "crc32": 305419896}, "__0_0.distcp": {...}}}

Order matters, because `.metadata` is what makes a folder count as complete: each rank writes its
record (temp file, fsync, rename) right after its shards, before it reports them written to DCP's
coordinator, and the coordinator writes `.metadata` only once every rank has reported; it adds the
checksum of the finished `.metadata` temp file to rank 0's record before renaming it into place. So
a save cut short at any point (kill -9 of a rank, of torchrun, a node failure) leaves either a folder
without `.metadata`, which a resume passes over, or one with every record. A folder saved before
this order (or before checksums existed) may lack records: it loads as before, with a warning that
it was not verified. CRC32 finds every burst of up to 32 changed bits and other random damage with
probability 1 - 2^-32; it does not defend against deliberate tampering, which is not what it is
for. zlib computed it at 2.6 GB/s on a 2-core CPU VM, and releases the GIL on large buffers.
"""

from __future__ import annotations

import json
import re
import time
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch.distributed as dist
from torch.futures import Future
from torch.distributed.checkpoint import FileSystemWriter
from torch.distributed.checkpoint.filesystem import FileSystem

from trainer.checkpoint_errors import CheckpointReadError, damage_failure, size
from trainer.checkpoint_folders import read_metadata, shard_lengths
from trainer.distributed import on_rank0
from trainer.files import atomic_write
from trainer.log import logger

CHECKSUM_DIR = ".checksums"
METADATA = ".metadata"
# Files are read in chunks of this size into one reused buffer: memory stays flat for any shard.
CHUNK_BYTES = 16 * 2**20
VERSION = 1
_RECORD_RE = re.compile(r"^rank-(\d+)\.json$")
# DCP's FileSystemWriter names rank r's files __{r}_{i}.distcp (its prepare_global_plan gives plan i
# the prefix __{i}_, and DCP gathers one plan per rank of the save's group, in rank order; the
# checkpoint group of trainer/checkpoint.py holds every rank, so that is the global rank). A torch
# that named them otherwise would leave files out of every record: a load then warns that they are
# unverified (expected_checksums), it does not pass them silently.
_SHARD_RE = "^__{rank}_[0-9]+\\.distcp$"


def file_crc32(path: Path, chunk_bytes: int = CHUNK_BYTES) -> tuple[int, int]:
    """(length in bytes, CRC32) of the file at `path`, read in chunks of `chunk_bytes`."""
    buf = bytearray(chunk_bytes)
    view = memoryview(buf)
    crc = total = 0
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            crc = zlib.crc32(view[:n], crc)
            total += n
    return total, crc


def rank_files(folder: Path, rank: int) -> list[Path]:
    """The files of step folder `folder` that `rank` wrote: its shards, and for rank 0 `.metadata`
    (DCP's coordinator, rank 0 of the save's group, writes it)."""
    pattern = re.compile(_SHARD_RE.format(rank=rank))
    found = sorted(p for p in Path(folder).iterdir() if pattern.match(p.name) and p.is_file())
    if rank == 0 and (Path(folder) / ".metadata").is_file():
        found.insert(0, Path(folder) / ".metadata")
    return found


@dataclass(frozen=True)
class Recorded:
    """What one rank's record covers, for the save's log line."""

    files: int
    bytes: int
    seconds: float


def _write_record(folder: Path, rank: int, entries: dict[str, dict[str, int]], seconds: float) -> None:
    out = Path(folder) / CHECKSUM_DIR
    out.mkdir(exist_ok=True)
    text = json.dumps({"version": VERSION, "algorithm": "crc32", "rank": rank,
                       "seconds": round(seconds, 4), "files": entries}, indent=1, sort_keys=True) + "\n"
    atomic_write(out / f"rank-{rank}.json", lambda f: f.write(text.encode()))


def record_files(folder: Path, rank: int, files: list[Path]) -> Recorded:
    """Hash `files` (all inside `folder`) and write them as `rank`'s record, atomically."""
    t0 = time.perf_counter()
    entries: dict[str, dict[str, int]] = {}
    for path in files:
        n, crc = file_crc32(path)
        entries[path.name] = {"bytes": n, "crc32": crc}
    seconds = time.perf_counter() - t0
    _write_record(folder, rank, entries, seconds)
    return Recorded(len(entries), sum(e["bytes"] for e in entries.values()), seconds)


def add_to_record(folder: Path, rank: int, name: str, source: Path) -> None:
    """Add file `source`'s length and CRC32, under `name`, to `rank`'s record in step folder
    `folder` (rewritten atomically; made when missing)."""
    path = Path(folder) / CHECKSUM_DIR / f"rank-{rank}.json"
    t0 = time.perf_counter()
    entries: dict[str, dict[str, int]] = {}
    seconds = 0.0
    if path.is_file():
        raw = json.loads(path.read_text())
        entries, seconds = dict(raw["files"]), float(raw.get("seconds", 0.0))
    n, crc = file_crc32(source)
    entries[name] = {"bytes": n, "crc32": crc}
    _write_record(folder, rank, entries, seconds + time.perf_counter() - t0)


def record_rank(folder: Path, rank: int) -> Recorded:
    """Record the files `rank` wrote into step folder `folder`, once its write has finished (for a
    folder written outside a run, e.g. scripts/convert_checkpoint.py's, which is renamed into place
    only afterwards; a run's saves record through RecordingWriter)."""
    return record_files(folder, rank, rank_files(folder, rank))


def recorded(folder: Path, rank: int) -> Recorded:
    """What `rank`'s record in step folder `folder` covers (for the save's log line); zeros when it
    cannot be read (the log line then shows that it is missing)."""
    try:
        raw = json.loads((Path(folder) / CHECKSUM_DIR / f"rank-{rank}.json").read_text())
        files = raw["files"]
        return Recorded(len(files), sum(int(e["bytes"]) for e in files.values()),
                        float(raw.get("seconds", 0.0)))
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return Recorded(0, 0, 0.0)


class _RecordsMetadataFirst(FileSystem):
    """DCP's FileSystem, except that putting the finished `.metadata` temp file into place (DCP's
    coordinator renames it: torch 2.11-2.14) first adds its checksum to rank 0's record, so the
    record names `.metadata` before the folder counts as complete."""

    def rename(self, path: Any, new_path: Any) -> None:
        if Path(new_path).name == METADATA:
            add_to_record(Path(new_path).parent, 0, METADATA, Path(path))
        super().rename(path, new_path)


# DCP's FileSystemWriter gives rank r's plan the storage prefix "__{r}_" (prepare_global_plan).
_PREFIX_RE = re.compile(r"^__(\d+)_$")


class RecordingWriter(FileSystemWriter):
    """DCP's FileSystemWriter that records each rank's checksums as part of the save: after the
    rank's shards are written and before it reports them to the coordinator (write_data), and
    `.metadata`'s before it is renamed into place (see the module docstring for why). It runs where
    DCP writes: the training thread, DCP's async thread, or a writer process (it is pickled there)."""

    def __init__(self, path: Any, *args: Any, **kwargs: Any) -> None:
        super().__init__(path, *args, **kwargs)
        self.fs = _RecordsMetadataFirst()

    def write_data(self, plan: Any, planner: Any) -> Future:
        written = super().write_data(plan, planner)
        results = written.wait()  # raises the write's own failure: then nothing is recorded
        folder = Path(self.path)
        names = sorted({wr.storage_data.relative_path for wr in results})
        record_files(folder, self._rank(plan), [folder / name for name in names])
        return written

    def _rank(self, plan: Any) -> int:
        match = _PREFIX_RE.match(str(getattr(plan.storage_data, "prefix", "")))
        if match:
            return int(match.group(1))
        rank = getattr(self, "rank", None)  # set by set_up_storage_writer on newer torch
        if isinstance(rank, int):
            return rank
        raise RuntimeError(f"checkpoint {self.path}: cannot tell which rank writes the files of storage "
                           f"prefix {plan.storage_data!r}, so their checksums cannot be recorded")

    def finish(self, metadata: Any, results: Any) -> None:
        super().finish(metadata, results)
        # A torch that put .metadata in place without a rename: record it now, just after (a crash
        # in between leaves .metadata alone unverified; the shards are recorded already).
        folder = Path(self.path)
        try:
            listed = METADATA in read_record(folder / CHECKSUM_DIR / "rank-0.json")
        except (OSError, ValueError):
            listed = False
        if not listed and (folder / METADATA).is_file():
            add_to_record(folder, 0, METADATA, folder / METADATA)


def _uint(value: object, limit: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and 0 <= value < limit


def read_record(path: Path) -> dict[str, tuple[int, int]]:
    """{file name: (bytes, crc32)} of one rank's record; ValueError (or OSError) says what is wrong."""
    raw = json.loads(Path(path).read_text())
    if not isinstance(raw, dict) or raw.get("algorithm") != "crc32" or not isinstance(raw.get("files"), dict):
        raise ValueError("it is not a checksum record ({'algorithm': 'crc32', 'files': {...}})")
    if raw.get("version") != VERSION:
        raise ValueError(f"its version is {raw.get('version')!r}; this titankit reads version {VERSION}")
    out: dict[str, tuple[int, int]] = {}
    for name, entry in raw["files"].items():
        # A name must be a file of the step folder itself: a record never sends a read elsewhere.
        if not name or name in (".", "..") or "/" in name or "\\" in name:
            raise ValueError(f"{name!r} is not the name of a file in the step folder")
        if not isinstance(entry, dict) or not _uint(entry.get("bytes"), 2**63) \
                or not _uint(entry.get("crc32"), 2**32):
            raise ValueError(f"the entry of {name} is {entry!r}, not {{'bytes': n, 'crc32': c}} with "
                             "integers n >= 0 and 0 <= c < 2**32")
        out[name] = (entry["bytes"], entry["crc32"])
    return out


@dataclass
class Expected:
    """What a load can check in one step folder: {file name: (bytes, crc32)} from every readable
    record, and one note per reason that some of its files cannot be checked (for warnings)."""

    files: dict[str, tuple[int, int]]
    notes: list[str]


def _some(names: list[str], shown: int = 4) -> str:
    more = f" and {len(names) - shown} more" if len(names) > shown else ""
    return ", ".join(names[:shown]) + more


def expected_checksums(folder: Path) -> Expected:
    """The recorded checksums of complete step folder `folder`, and notes on what they leave out.

    A record that cannot be read (not JSON, cut short, wrong fields) is noted and its files go
    unverified, rather than stopping the load: the records are written atomically, so a damaged one
    is damage to that small file, which says nothing about the shards; stopping would make a run
    fail on a file whose only job is to check others, and the shards it lists are still checked by
    DCP's completeness rules. The note names the file, so the damage is not silent.
    """
    folder = Path(folder)
    checks = folder / CHECKSUM_DIR
    needed = sorted([".metadata", *shard_lengths(read_metadata(folder))])
    if not checks.is_dir():
        return Expected({}, [
            f"checkpoint {folder} has no checksums ({CHECKSUM_DIR}/): it was saved before titankit "
            "recorded them, or its save stopped before writing them; its "
            f"{len(needed)} files are loaded without verifying their bytes"])
    files: dict[str, tuple[int, int]] = {}
    notes: list[str] = []
    records = sorted((int(m.group(1)), p) for p in checks.iterdir()
                     if (m := _RECORD_RE.match(p.name)))
    for _, path in records:
        try:
            for name, value in read_record(path).items():
                files.setdefault(name, value)
        except (OSError, ValueError) as exc:  # JSONDecodeError is a ValueError
            notes.append(f"checksum record {path} is unreadable ({type(exc).__name__}: {exc}); the "
                         "files it lists are loaded without verifying their bytes")
    unlisted = [n for n in needed if n not in files]
    if unlisted:
        notes.append(f"checkpoint {folder}: {len(unlisted)} of its {len(needed)} files have no "
                     f"readable checksum ({_some(unlisted)}) and are loaded without verifying "
                     "their bytes")
    return Expected(files, notes)


def check_files(folder: Path, expected: dict[str, tuple[int, int]],
                names: list[str]) -> list[tuple[str, str]]:
    """(file name, what differs) for each of `names` in `folder` whose length or CRC32 is not the
    recorded one; [] when all match. Reads each file once; one with another length is not hashed."""
    damaged = []
    for name in names:
        want_bytes, want_crc = expected[name]
        saved = f"saved {want_bytes:,} bytes with CRC32 {want_crc:08x}"
        path = Path(folder) / name
        try:
            size = path.stat().st_size
            if size != want_bytes:
                damaged.append((name, f"{saved}, found {size:,} bytes"))
                continue
            n, crc = file_crc32(path)
        except FileNotFoundError:
            damaged.append((name, f"{saved}, the file is missing"))
            continue
        except OSError as exc:  # an I/O error of the device is damage too
            damaged.append((name, f"{saved}, it cannot be read ({exc.strerror or exc})"))
            continue
        if (n, crc) != (want_bytes, want_crc):
            damaged.append((name, f"{saved}, found {n:,} bytes with CRC32 {crc:08x}"))
    return damaged


def share(names: list[str], rank: int, world_size: int) -> list[str]:
    """The files rank `rank` checks at a load: sorted name index % world_size == rank, so the ranks
    read the folder once between them."""
    return sorted(names)[rank::world_size]


def verify_step(path: Path, root: Path, rank: int, world_size: int, group: Any) -> None:
    """Collective over `group`, before any rank reads step folder `path`: check its files against
    their recorded checksums, each rank a share; any difference raises the same CheckpointReadError
    on every rank, naming each damaged file (`root`: the run's checkpoint folder, for the advice).
    Files without a readable checksum load unverified, with a warning from rank 0."""
    t0 = time.perf_counter()
    # One rank reads the records, so every rank checks against the same list and notes.
    expected = on_rank0(lambda: expected_checksums(path), rank, group)
    if rank == 0:
        for note in expected.notes:
            logger.warning(note)
    names = sorted(expected.files)
    found = check_files(path, expected.files, share(names, rank, world_size))
    every: list[Any] = [None] * world_size
    dist.all_gather_object(every, found, group=group)
    damaged = sorted(d for part in every for d in part)
    if damaged:
        raise CheckpointReadError(damage_failure(root, path, damaged, len(names)))
    if names and rank == 0:
        total = sum(expected.files[n][0] for n in names)
        logger.info(f"checkpoint: {len(names)} files ({size(total)}) of {path} match their checksums, "
                    f"checked by {world_size} rank(s) in {time.perf_counter() - t0:.2f}s")
