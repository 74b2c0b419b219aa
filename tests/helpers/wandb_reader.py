"""Read back what wandb wrote into a run folder, without the wandb service or network.

wandb 0.31 keeps history and config only inside run_dir/wandb/<offline-run-*|run-*>/run-<id>.wandb,
written by its Go core (core/internal/transactionlog + core/pkg/leveldb, a LevelDB-log variant):

  file    := header block*          header = b":W&B", magic 0xBEE1 (u16 LE), version (u8)
  block   := 32 KiB of chunks; the file header sits inside the first block; a block tail shorter
             than a chunk header (7 bytes), or an all-zero header, is padding
  chunk   := crc32 (u32 LE, IEEE over the type byte + payload), length (u16 LE), type (u8:
             1 full, 2 first, 3 middle, 4 last), payload
  record  := the payloads of one full chunk, or first + middle* + last, concatenated; it is a
             serialized wandb.proto.wandb_internal_pb2.Record

History records carry item[] with `key` or `nested_key` and a JSON `value_json`; "_step" is the step.
"""

from __future__ import annotations

import json
import re
import struct
import time
import zlib
from pathlib import Path
from typing import Any, Iterator

BLOCK = 32 * 1024
CHUNK_HEADER = 7
FULL, FIRST, MIDDLE, LAST = 1, 2, 3, 4
_DIR_RE = re.compile(r"^(?:offline-)?run-(\d{8}_\d{6})-(.+?)(?:-(\d+))?$")


def iter_records(path: Path) -> Iterator[bytes]:
    """Payloads of every record in one .wandb file, checking each chunk's CRC."""
    data = Path(path).read_bytes()
    if len(data) < 7:
        raise ValueError(f"{path}: {len(data)} bytes, shorter than the 7-byte .wandb header")
    ident, magic, version = struct.unpack("<4sHB", data[:7])
    if ident != b":W&B" or magic != 0xBEE1:
        raise ValueError(f"{path}: not a .wandb file (header {data[:7]!r})")
    if version != 0:
        raise ValueError(f"{path}: .wandb version {version}, this reader knows version 0")
    pos, parts = 7, None
    while pos < len(data):
        room = BLOCK - pos % BLOCK
        if room < CHUNK_HEADER:
            pos += room
            continue
        if pos + CHUNK_HEADER > len(data):
            raise ValueError(f"{path}: truncated chunk header at byte {pos}")
        crc, length, ctype = struct.unpack("<IHB", data[pos : pos + CHUNK_HEADER])
        if crc == 0 and length == 0 and ctype == 0:  # zero padding up to the next block
            pos += room
            continue
        payload = data[pos + CHUNK_HEADER : pos + CHUNK_HEADER + length]
        if CHUNK_HEADER + length > room or len(payload) != length:
            raise ValueError(f"{path}: chunk at byte {pos} runs past its block or the file")
        if zlib.crc32(bytes([ctype]) + payload) != crc:
            raise ValueError(f"{path}: CRC mismatch in the chunk at byte {pos}")
        pos += CHUNK_HEADER + length
        if ctype == FULL:
            yield payload
        elif ctype == FIRST:
            parts = [payload]
        elif ctype in (MIDDLE, LAST):
            if parts is None:
                raise ValueError(f"{path}: chunk type {ctype} at byte {pos} without a first chunk")
            parts.append(payload)
            if ctype == LAST:
                yield b"".join(parts)
                parts = None
        else:
            raise ValueError(f"{path}: unknown chunk type {ctype} at byte {pos}")


def wandb_files(run_dir: Path) -> list[Path]:
    """The run's .wandb files in the order they were written (a resumed run has one per process)."""
    found = []
    for d in (Path(run_dir) / "wandb").iterdir():
        m = _DIR_RE.match(d.name)
        if m is None or d.is_symlink() or not d.is_dir():
            continue  # latest-run is a symlink to one of the others
        # wandb adds -1, -2, ... when two runs start in the same second: sort numerically.
        key = (m.group(1), int(m.group(3) or 0))
        found += [(key, f) for f in d.glob("run-*.wandb")]
    return [f for _, f in sorted(found)]


def _parse(path: Path) -> list[Any]:
    from wandb.proto import wandb_internal_pb2

    records = []
    for payload in iter_records(path):
        rec = wandb_internal_pb2.Record()
        rec.ParseFromString(payload)
        records.append(rec)
    return records


def _records(run_dir: Path, wait_s: float) -> Iterator[Any]:
    """Records of all the run folder's .wandb files, in order.

    wandb's run.finish() returns before its core has flushed and closed the file (the core buffers
    records in 32 KiB blocks until the stream closes), so a read in the same process must wait for
    each file's final "exit" record. wait_s = 0 reads whatever is there (e.g. a crashed run).
    """
    deadline = time.monotonic() + wait_s
    for path in wandb_files(run_dir):
        records = _parse(path)
        while wait_s > 0 and not (records and records[-1].WhichOneof("record_type") == "exit"):
            if time.monotonic() > deadline:
                raise TimeoutError(f"{path}: no exit record after {wait_s:g} s (is the run still open?)")
            time.sleep(0.05)
            records = _parse(path)
        yield from records


def _item_key(item: Any) -> str:
    return item.key if item.key else ".".join(item.nested_key)


def read_wandb_history(run_dir: Path, wait_s: float = 30.0) -> list[dict]:
    """Every history row of the run folder's wandb runs, in order; each row includes "_step"."""
    rows = []
    for rec in _records(run_dir, wait_s):
        if rec.WhichOneof("record_type") == "history":
            rows.append({_item_key(i): json.loads(i.value_json) for i in rec.history.item})
    return rows


def read_wandb_config(run_dir: Path, wait_s: float = 30.0) -> dict:
    """The run config (top-level keys as given to wandb.init), wandb's own "_wandb" key left out."""
    config: dict = {}
    for rec in _records(run_dir, wait_s):
        kind = rec.WhichOneof("record_type")
        updates = rec.run.config.update if kind == "run" else rec.config.update if kind == "config" else []
        for item in updates:
            config[_item_key(item)] = json.loads(item.value_json)
        if kind == "config":
            for item in rec.config.remove:
                config.pop(_item_key(item), None)
    config.pop("_wandb", None)
    return config
