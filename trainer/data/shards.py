"""Token shards: a flat `.bin` of token ids plus a small `.json` header, and a reader over a folder.

A shard `NAME.bin` holds `count` tokens as little-endian uint16 (vocab <= 65536) or uint32. Its
header `NAME.json` holds {"version", "dtype", "count", "eos_id", "tokenizer_fingerprint",
"vocab_size"} and optional provenance ("source"). Both files are written to a temporary name and
renamed, the header last: a shard exists only once its header does, so an interrupted writer never
leaves a half-written shard that a reader would count.

`TokenSource` presents the shards of a folder (sorted by name) as one concatenated token array.

A folder's completion marker `COMPLETE.json` is written last by whatever made the whole folder
(scripts/prepare_data.py, the embedded corpus): {"shards": count, "tokens": total, "tokenizer":
fingerprint, optional "shard_list": [[name, count], ...]}. TokenSource checks the folder against it,
and refuses a folder of prepare_data shards (headers with a "source" unit) that has none: that run
did not finish, and training on part of a dataset must never happen silently.
"""

from __future__ import annotations

import hashlib
import json
import warnings
from collections import OrderedDict
from pathlib import Path
from typing import Any

import numpy as np

from trainer.files import atomic_write

SHARD_VERSION = 1
MAX_OPEN_SHARDS = 64
_DTYPES = {"uint16": np.dtype("<u2"), "uint32": np.dtype("<u4")}
_REQUIRED = ("version", "dtype", "count", "eos_id", "tokenizer_fingerprint", "vocab_size")
COMPLETE_MARKER = "COMPLETE.json"


def shard_dtype(vocab_size: int) -> np.dtype:
    """uint16 while every id fits (vocab_size <= 65536), else uint32."""
    return _DTYPES["uint16"] if vocab_size <= 65536 else _DTYPES["uint32"]


def header_path(bin_path: str | Path) -> Path:
    return Path(bin_path).with_suffix(".json")


def make_header(tokenizer, count: int, source: Any = None) -> dict:
    """The header of a shard of `count` tokens made by `tokenizer`."""
    header = {
        "version": SHARD_VERSION,
        "dtype": shard_dtype(tokenizer.vocab_size).name,
        "count": int(count),
        "eos_id": int(tokenizer.eos_id),
        "tokenizer_fingerprint": tokenizer.fingerprint,
        "vocab_size": int(tokenizer.vocab_size),
    }
    if source is not None:
        header["source"] = source
    return header


def write_shard_data(bin_path: str | Path, tokens: np.ndarray, vocab_size: int) -> int:
    """Write the `.bin` only (atomically). Returns the token count. Call `write_shard_header` after."""
    bin_path = Path(bin_path)
    dtype = shard_dtype(vocab_size)
    tokens = np.asarray(tokens)
    if tokens.ndim != 1:
        raise ValueError(f"shard {bin_path}: tokens must be 1-D, got shape {tokens.shape}")
    if tokens.size and (int(tokens.min()) < 0 or int(tokens.max()) >= vocab_size):
        raise ValueError(
            f"shard {bin_path}: token ids must lie in [0, {vocab_size}), got [{tokens.min()}, {tokens.max()}]"
        )
    data = tokens.astype(dtype, copy=False)
    atomic_write(bin_path, lambda f: f.write(memoryview(np.ascontiguousarray(data)).cast("B")))
    return int(data.size)


def write_shard_header(bin_path: str | Path, header: dict) -> None:
    """Write the `.json` header (atomically); from this moment the shard counts."""
    text = json.dumps(header, indent=1, sort_keys=True).encode("ascii")
    atomic_write(header_path(bin_path), lambda f: f.write(text))


def write_shard(bin_path: str | Path, tokens: np.ndarray, tokenizer, source: Any = None) -> dict:
    """Write one complete shard (data, then header). Returns its header."""
    count = write_shard_data(bin_path, tokens, tokenizer.vocab_size)
    header = make_header(tokenizer, count, source)
    write_shard_header(bin_path, header)
    return header


def read_header(bin_path: str | Path, expected_fingerprint: str | None = None) -> dict:
    """Read and validate the header of `bin_path` against the `.bin` on disk.

    Raises ValueError naming the file when the header is missing or malformed, when the `.bin` size
    does not match `count` (truncated or overlong), or when the tokenizer fingerprint differs.
    """
    bin_path = Path(bin_path)
    hpath = header_path(bin_path)
    try:
        header = json.loads(hpath.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ValueError(f"shard {bin_path} has no header {hpath.name} (an interrupted write?)") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(f"shard header {hpath} is not valid JSON: {e}") from e
    missing = [k for k in _REQUIRED if k not in header] if isinstance(header, dict) else list(_REQUIRED)
    if missing:
        raise ValueError(f"shard header {hpath} lacks {missing}; expected keys {list(_REQUIRED)}")
    if header["version"] != SHARD_VERSION:
        raise ValueError(f"shard header {hpath}: version {json.dumps(header['version'])}, this reader knows "
                         f"{SHARD_VERSION} (the integer); re-make the shard with scripts/prepare_data.py")
    if header["dtype"] not in _DTYPES:
        raise ValueError(f"shard header {hpath}: dtype {header['dtype']!r}, valid: {sorted(_DTYPES)}")
    count = header["count"]
    if not _is_int(count) or count < 0:
        raise ValueError(
            f"shard header {hpath}: count {json.dumps(count)} must be a non-negative integer")
    # The reader compares ids with vocab_size and eos_id on every batch: a string or null there
    # would surface at the first step as a TypeError inside gather(), and a string eos_id would
    # match no token, so data.document_mask would silently mask nothing.
    vocab = header["vocab_size"]
    if not _is_int(vocab) or vocab < 1:
        raise ValueError(f"shard header {hpath}: vocab_size {json.dumps(vocab)} must be a positive "
                         "integer (the tokenizer's vocabulary size)")
    eos = header["eos_id"]
    if not _is_int(eos) or not 0 <= eos < vocab:
        raise ValueError(f"shard header {hpath}: eos_id {json.dumps(eos)} must be an integer token "
                         f"id in [0, vocab_size = {vocab})")
    if not isinstance(header["tokenizer_fingerprint"], str):
        raise ValueError(f"shard header {hpath}: tokenizer_fingerprint "
                         f"{json.dumps(header['tokenizer_fingerprint'])} must be a string")
    itemsize = _DTYPES[header["dtype"]].itemsize
    try:
        size = bin_path.stat().st_size
    except FileNotFoundError:
        raise ValueError(f"shard {bin_path} is missing (its header {hpath.name} exists)") from None
    if bin_path.is_dir():  # its st_size (4096) would read as a truncated shard
        raise ValueError(f"shard {bin_path} is a folder, not a file of tokens (its header {hpath.name} "
                         "names a shard there); move the folder or regenerate the shard")
    if size != count * itemsize:
        raise ValueError(
            f"shard {bin_path} is {size} bytes but its header says {count} {header['dtype']} tokens "
            f"({count * itemsize} bytes): the file is truncated or corrupt; regenerate it"
        )
    if expected_fingerprint is not None and header["tokenizer_fingerprint"] != expected_fingerprint:
        raise ValueError(
            f"shard {bin_path} was made by tokenizer {header['tokenizer_fingerprint']!r} but this run's "
            f"tokenizer is {expected_fingerprint!r}: re-run scripts/prepare_data.py with the run's "
            f"data.tokenizer, or set data.tokenizer to the one that made the shards"
        )
    return header


def _is_int(value: Any) -> bool:
    """A JSON integer: bool is an int subclass in Python, but `true` is no token count."""
    return isinstance(value, int) and not isinstance(value, bool)


def open_shard(bin_path: str | Path, expected_fingerprint: str | None = None) -> tuple[np.ndarray, dict]:
    """Validated read-only memmap of a shard -> (tokens (count,), header)."""
    header = read_header(bin_path, expected_fingerprint)
    dtype = _DTYPES[header["dtype"]]
    if header["count"] == 0:
        return np.empty(0, dtype=dtype), header  # mmap cannot map an empty file
    return np.memmap(bin_path, dtype=dtype, mode="r", shape=(header["count"],)), header


def write_complete_marker(folder: str | Path, info: dict) -> None:
    """Write `folder/COMPLETE.json` atomically: call it as the very last act of making the folder."""
    text = json.dumps(info, indent=1, sort_keys=True).encode("ascii")
    atomic_write(Path(folder) / COMPLETE_MARKER, lambda f: f.write(text))


def read_complete_marker(folder: str | Path) -> dict | None:
    """The folder's COMPLETE.json, or None when it has none."""
    path = Path(folder) / COMPLETE_MARKER
    try:
        marker = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ValueError(
            f"completion marker {path} is not valid JSON ({e}); rerun the tool that made the folder") from e
    if not isinstance(marker, dict):
        raise ValueError(f"completion marker {path} is not a JSON object; rerun the tool that made the folder")
    # check_complete compares these with the shards; one of another type would skip its check unseen.
    for key, ok, valid in (("shards", _is_count, "a shard count"), ("tokens", _is_count, "a token count"),
                           ("tokenizer", lambda v: isinstance(v, str), "a tokenizer fingerprint string")):
        if key in marker and not ok(marker[key]):
            raise ValueError(f"completion marker {path}: {key} {json.dumps(marker[key])} is not {valid}; "
                             "the file is damaged or was edited: rerun the tool that made the folder")
    return marker


def _is_count(value: Any) -> bool:
    return _is_int(value) and value >= 0


def remove_complete_marker(folder: str | Path) -> None:
    """Invalidate the folder's marker before changing its shards (a no-op when it has none)."""
    (Path(folder) / COMPLETE_MARKER).unlink(missing_ok=True)


def is_prepare_data_shard(header: dict) -> bool:
    """Whether a shard header was written by scripts/prepare_data.py (its source names a unit and parts)."""
    source = header.get("source")
    return isinstance(source, dict) and "unit" in source and "parts" in source


def check_complete(folder: Path, shards: list[tuple[str, dict]]) -> None:
    """Check the shards of `folder` ([(name, header)] of every .bin with a header) against its
    COMPLETE.json. Raises ValueError naming the folder and what differs; without a marker, raises
    when the shards come from scripts/prepare_data.py (it writes the marker last)."""
    marker = read_complete_marker(folder)
    if marker is None:
        if any(is_prepare_data_shard(h) for _, h in shards):
            raise ValueError(
                f"dataset folder {folder} has no {COMPLETE_MARKER}: scripts/prepare_data.py did not finish "
                f"there (killed, failed or still running), so it may hold only part of the dataset. Rerun the "
                f"same prepare_data command to complete it (finished units are skipped). A folder made by "
                f"titankit before markers existed gets its marker from that rerun too, or, when its inputs are "
                f"gone, from: python scripts/prepare_data.py --mark-complete --output {folder}"
            )
        return  # made by another tool (write_shard): nothing says which shards belong
    counts = {name: int(h["count"]) for name, h in shards}
    diffs: list[str] = []
    listed = marker.get("shard_list")
    if listed is not None:
        expected = _listed_counts(folder, listed)
        missing = sorted(set(expected) - set(counts))
        extra = sorted(set(counts) - set(expected))
        changed = [f"{n} has {counts[n]} tokens, listed with {expected[n]}"
                   for n in sorted(expected) if n in counts and counts[n] != expected[n]]
        if missing:
            diffs.append(f"{len(missing)} listed shard(s) missing or without a header: {missing[:5]}")
        if extra:
            diffs.append(f"{len(extra)} shard(s) not listed: {extra[:5]}")
        diffs.extend(changed[:5])
    elif isinstance(marker.get("shards"), int) and marker["shards"] != len(counts):
        diffs.append(f"{len(counts)} shard(s) present, {marker['shards']} listed")
    total = sum(counts.values())
    if not diffs and isinstance(marker.get("tokens"), int) and marker["tokens"] != total:
        diffs.append(f"{total} tokens present, {marker['tokens']} listed")
    fps = {h["tokenizer_fingerprint"] for _, h in shards}
    if isinstance(marker.get("tokenizer"), str) and fps != {marker["tokenizer"]}:
        diffs.append(f"tokenizer {sorted(fps)}, listed {marker['tokenizer']!r}")
    if diffs:
        raise ValueError(
            f"dataset folder {folder} does not match its {COMPLETE_MARKER} (written when the folder was "
            f"finished): {'; '.join(diffs)}. Shards were removed, added or changed since: restore the folder, "
            f"or rerun the scripts/prepare_data.py command that made it to redo the missing part"
        )


def _listed_counts(folder: Path, listed: Any) -> dict[str, int]:
    """COMPLETE.json's "shard_list" as {name: token count}. A damaged or hand-edited entry is
    refused naming the marker and the entry: unpacked as it came, it failed as a bare "not enough
    values to unpack" or "invalid literal for int()" that named neither."""
    entries = listed if isinstance(listed, list) else [listed]
    for entry in entries:
        if not (isinstance(listed, list) and isinstance(entry, list) and len(entry) == 2
                and isinstance(entry[0], str) and _is_count(entry[1])):
            raise ValueError(
                f"completion marker {Path(folder) / COMPLETE_MARKER}: shard_list entry "
                f"{json.dumps(entry)} is not a [\"NAME.bin\", token count] pair (shard_list is a "
                "list of them, one per shard); the file is damaged or was edited: rerun the tool "
                "that made the folder")
    return {name: count for name, count in entries}


def content_fingerprint(tokenizer_fingerprint: str, names: list[str], counts: list[int]) -> str:
    """A short identity of a concatenation of shards: the tokenizer and each shard's name and token
    count, in reading order. Built from the headers alone (no token is read), so it is free for a
    corpus of thousands of shards, and it survives moving or copying the folder. Other shards, a
    shard added, removed, renamed or regenerated with another length, all change it."""
    ident = json.dumps([tokenizer_fingerprint, [[n, int(c)] for n, c in zip(names, counts)]])
    return "sha256:" + hashlib.sha256(ident.encode()).hexdigest()[:16]


class TokenSource:
    """The shards of a folder as one concatenated token array (read-only, memory-mapped).

    Global offset t lies in shard k where offsets[k] <= t < offsets[k + 1]. `len(src)` is the total
    token count; `src[a:b]` and `src.gather(starts, length)` read across shard boundaries.
    `content_fingerprint` identifies the token sequence it presents (see content_fingerprint()).
    """

    def __init__(self, folder: str | Path, expected_fingerprint: str | None = None, name: str | None = None):
        self.folder = Path(folder).expanduser()
        self.name = name or str(self.folder)
        if not self.folder.is_dir():
            raise ValueError(
                f"dataset folder {self.folder} does not exist (data.dataset: 'embedded' or a folder of token shards)"
            )
        bins = sorted(p for p in self.folder.glob("*.bin") if not p.name.startswith("."))
        complete = [p for p in bins if header_path(p).exists()]
        if len(complete) < len(bins):
            warnings.warn(
                f"dataset folder {self.folder}: ignoring {len(bins) - len(complete)} .bin file(s) without a "
                f".json header (an interrupted scripts/prepare_data.py? re-run it to finish them)",
                stacklevel=2,
            )
        if not complete:
            raise ValueError(
                f"dataset folder {self.folder} holds no token shards (NAME.bin + NAME.json); make them with "
                f"scripts/prepare_data.py --output {self.folder}"
            )
        self.paths: list[Path] = []
        self.counts: list[int] = []
        first: dict | None = None
        first_path = complete[0]
        headers: list[tuple[str, dict]] = []
        for p in complete:
            header = read_header(p, expected_fingerprint)
            headers.append((p.name, header))
            if first is None:
                first = header
            elif header["tokenizer_fingerprint"] != first["tokenizer_fingerprint"]:
                raise ValueError(
                    f"dataset folder {self.folder} mixes tokenizers: {first_path.name} has "
                    f"{first['tokenizer_fingerprint']!r}, {p.name} has {header['tokenizer_fingerprint']!r}"
                )
            else:
                # The first header's dtype, eos_id and vocab_size stand for every shard (memmaps,
                # document mask, id check), so one that differs was edited or made elsewhere.
                for key in ("dtype", "eos_id", "vocab_size"):
                    if header[key] != first[key]:
                        raise ValueError(
                            f"dataset folder {self.folder}: shard header {header_path(p).name} has "
                            f"{key} {header[key]!r} but {header_path(first_path).name} has "
                            f"{first[key]!r}; the shards of one folder come from one tokenizer and "
                            f"must agree: re-make them with scripts/prepare_data.py"
                        )
            if header["count"]:
                self.paths.append(p)
                self.counts.append(header["count"])
        assert first is not None
        check_complete(self.folder, headers)
        self.eos_id: int = first["eos_id"]
        self.vocab_size: int = first["vocab_size"]
        self.fingerprint: str = first["tokenizer_fingerprint"]
        self.dtype = _DTYPES[first["dtype"]]
        self.content_fingerprint: str = content_fingerprint(
            self.fingerprint, [p.name for p in self.paths], self.counts)
        # offsets: (n_shards + 1,) int64, offsets[k] = global index of shard k's first token.
        self.offsets = np.zeros(len(self.counts) + 1, dtype=np.int64)
        np.cumsum(self.counts, out=self.offsets[1:])
        # Open memmaps, least recently used first. Each mmap holds a file descriptor, so a corpus
        # of thousands of shards keeps only the recently read ones open.
        self._open: OrderedDict[int, np.ndarray] = OrderedDict()

    def shard(self, k: int) -> np.ndarray:
        """Memmap of shard k, (counts[k],) of self.dtype."""
        arr = self._open.pop(k, None)
        if arr is None:
            arr = np.memmap(self.paths[k], dtype=self.dtype, mode="r", shape=(self.counts[k],))
            if len(self._open) >= MAX_OPEN_SHARDS:
                self._open.popitem(last=False)
        self._open[k] = arr
        return arr

    def __len__(self) -> int:
        return int(self.offsets[-1])

    @property
    def n_tokens(self) -> int:
        return int(self.offsets[-1])

    def __getitem__(self, key: slice) -> np.ndarray:
        if not isinstance(key, slice) or key.step not in (None, 1):
            raise TypeError("TokenSource supports contiguous slices only, e.g. src[a:b]")
        start, stop, _ = key.indices(len(self))
        return self.gather(np.array([start], dtype=np.int64), max(0, stop - start))[0]

    def gather(self, starts: np.ndarray, length: int) -> np.ndarray:
        """Windows [s, s + length) for each s in `starts` -> (len(starts), length) array of self.dtype.

        Windows inside one shard (the common case) are read with one fancy index per shard; the few
        that straddle a boundary are assembled piecewise.
        """
        starts = np.asarray(starts, dtype=np.int64)
        out = np.empty((len(starts), length), dtype=self.dtype)
        if len(starts) == 0 or length == 0:
            return out
        if starts.min() < 0 or starts.max() + length > len(self):
            raise IndexError(f"window out of range for {self.name}: {len(self)} tokens, length {length}")
        first = np.searchsorted(self.offsets, starts, side="right") - 1
        last = np.searchsorted(self.offsets, starts + length - 1, side="right") - 1
        cols = np.arange(length, dtype=np.int64)
        inside = first == last
        for k in np.unique(first[inside]):
            rows = np.nonzero(inside & (first == k))[0]
            local = starts[rows] - self.offsets[k]
            out[rows] = self.shard(int(k))[local[:, None] + cols[None, :]]
        for r in np.nonzero(~inside)[0]:
            pos, end, filled = int(starts[r]), int(starts[r]) + length, 0
            for k in range(int(first[r]), int(last[r]) + 1):
                lo = pos - int(self.offsets[k])
                hi = min(end, int(self.offsets[k + 1])) - int(self.offsets[k])
                out[r, filled : filled + hi - lo] = self.shard(k)[lo:hi]
                filled += hi - lo
                pos = int(self.offsets[k]) + hi
        # A flipped bit or a foreign .bin under a valid header gives ids past the vocabulary; on a
        # GPU the embedding would fail later as an opaque device-side assert. One max per batch.
        if int(out.max()) >= self.vocab_size:
            self._raise_bad_id(out, starts)
        return out

    def _raise_bad_id(self, out: np.ndarray, starts: np.ndarray) -> None:
        """ValueError naming the shard file and index of the first id >= vocab_size in `out`."""
        row, col = (int(i) for i in np.argwhere(out >= self.vocab_size)[0])
        t = int(starts[row]) + col
        k = int(np.searchsorted(self.offsets, t, side="right")) - 1
        raise ValueError(
            f"dataset {self.name}: shard {self.paths[k]} holds token id {int(out[row, col])} at index "
            f"{t - int(self.offsets[k])}, but its header's vocab_size is {self.vocab_size} (ids lie in "
            f"[0, {self.vocab_size})): the .bin is corrupt or belongs to another tokenizer; re-make it "
            f"with scripts/prepare_data.py"
        )

    def __repr__(self) -> str:
        return f"TokenSource({self.name!r}, shards={len(self.paths)}, tokens={len(self)})"
