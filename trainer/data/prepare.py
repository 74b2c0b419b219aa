"""Tokenize text corpora into token shards, in parallel and resumably (scripts/prepare_data.py).

Inputs (.txt = one document per file, .jsonl = one document per line in field `text_key`,
.parquet = column `text_key`, `hf:NAME[:split]` = a HF `datasets` dataset) are planned into
deterministic work units of about `unit_bytes` of text: groups of .txt files, byte ranges of a
.jsonl (a line belongs to the range holding its first byte), row-group ranges of a .parquet, row
ranges of a dataset. Unit u writes shards `shard-{u:06d}-{part:04d}.bin` (each at most
`shard_tokens` tokens; every document followed by EOS), all data first, then the headers, each
recording the unit's description, the part count and `unit_bytes`. A rerun plans the same units and
skips those whose shards are all complete, so an interrupted run resumes where it stopped.

The folder counts as prepared only once `COMPLETE.json` exists (shards.COMPLETE_MARKER): written
atomically as the run's last act (inputs, tokenizer, units, the shard list and total tokens),
removed at the start of a run that will change the folder. A run holds an exclusive flock on
`.prepare_data.lock` inside the folder, so a second run into the same folder stops at once.
"""

from __future__ import annotations

import fnmatch
import glob
import json
import multiprocessing as mp
import os
import re
import socket
import time
from concurrent.futures import ProcessPoolExecutor, as_completed
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from trainer.files import file_lock

from .dataset_hint import RAW_SUFFIXES, has_magic, sibling_folder
from .shards import (
    COMPLETE_MARKER,
    is_prepare_data_shard,
    make_header,
    read_complete_marker,
    read_header,
    remove_complete_marker,
    write_complete_marker,
    write_shard_data,
    write_shard_header,
)
from .tokenizer import build_tokenizer

SUFFIXES = RAW_SUFFIXES
DEFAULT_UNIT_BYTES = 64 * 2**20
DEFAULT_SHARD_TOKENS = 2**26
_ENCODE_BATCH_BYTES = 4 * 2**20
LOCK_NAME = ".prepare_data.lock"
# Training cuts the stream into samples of training.seq_len + 1 tokens and refuses a dataset shorter
# than one (trainer/data/stream.py); seq_len >= 1, so fewer than 2 tokens can never train. Refused
# here, when the inputs are at hand, instead of at the first step of a run.
MIN_TOKENS = 2


@dataclass
class Unit:
    """One work unit: `desc` is JSON-able and identifies the unit's inputs exactly."""

    index: int
    desc: dict


@dataclass
class PrepareStats:
    units: int = 0
    skipped: int = 0
    done: int = 0
    documents: int = 0
    null_documents: int = 0
    tokens: int = 0
    text_chars: int = 0
    seconds: float = 0.0
    shards: list[str] = field(default_factory=list)
    total_tokens: int = 0  # the whole folder's, as written to COMPLETE.json

    def summary(self, output: Path) -> str:
        rate = self.tokens / self.seconds if self.seconds > 0 else 0.0
        lines = [
            f"prepare_data: {self.units} work unit(s) -> {output}",
            f"  skipped (already complete): {self.skipped}   tokenized now: {self.done}",
            f"  this run: {self.documents} documents, {self.text_chars / 1e6:.1f} M characters, "
            f"{self.tokens} tokens in {self.seconds:.1f}s ({rate / 1e6:.2f} M tokens/s)",
        ]
        if self.null_documents:
            lines.append(f"  skipped {self.null_documents} null document(s) (missing text value)")
        lines.append(f"  complete: {len(self.shards)} shard(s), {self.total_tokens} tokens ({COMPLETE_MARKER} written)")
        return "\n".join(lines)


# ----------------------------------------------------------------------------- planning


def expand_inputs(inputs: Sequence[str]) -> list[str]:
    """Each input: `hf:NAME[:split]`, a file, a folder (its .txt/.jsonl/.parquet files) or a glob."""
    out: list[str] = []
    for spec in inputs:
        if spec.startswith("hf:"):
            out.append(spec)
            continue
        path = Path(spec).expanduser()
        if has_magic(spec):
            matches = sorted(p for p in glob.glob(str(path), recursive=True) if Path(p).is_file())
            if not matches:
                raise ValueError(f"--input {spec!r}: the pattern matches no file")
            out.extend(matches)
        elif path.is_dir():
            matches = sorted(str(p) for p in path.rglob("*") if p.is_file() and p.suffix in SUFFIXES)
            if not matches:
                raise ValueError(f"--input {spec!r}: the folder holds no {'/'.join(SUFFIXES)} file")
            out.extend(matches)
        elif path.is_file():
            out.append(str(path))
        else:
            raise ValueError(f"--input {spec!r}: no such file, folder or glob match")
    for p in out:
        if not p.startswith("hf:") and Path(p).suffix not in SUFFIXES:
            raise ValueError(f"input {p}: unsupported file type; valid: {', '.join(SUFFIXES)} or hf:NAME[:split]")
    # Absolute paths: a rerun from another working directory plans identical units.
    out = [p if p.startswith("hf:") else os.path.abspath(p) for p in out]
    return list(dict.fromkeys(out))  # drop duplicates, keep order


def _glob_matches(pattern: str, path: Path) -> bool:
    """Whether glob.glob(pattern, recursive=True) lists `path` (an absolute path): the pattern's
    components match the path's one by one with fnmatch's rules, `**` standing for any number of
    them (names starting with "." aside: the shard names have none). Computed from the names, so it
    also answers for files not written yet."""
    pat = Path(os.path.abspath(os.path.expanduser(pattern))).parts
    parts = path.parts

    def match(i: int, j: int) -> bool:
        if i == len(pat):
            return j == len(parts)
        if pat[i] == "**":
            return any(match(i + 1, k) for k in range(j, len(parts) + 1))
        return j < len(parts) and fnmatch.fnmatchcase(parts[j], pat[i]) and match(i + 1, j + 1)

    return match(0, 0)


def check_output(inputs: Sequence[str], output: Path) -> None:
    """Refuse an --output that cannot be the shard folder, before anything is created or read.

    An existing file (typically the corpus itself, given as --input and --output) would only get a
    FileExistsError from mkdir; a folder whose shards an --input glob matches would feed them back
    as inputs on the rerun that resumes (and fail there as an unsupported file type)."""
    out = Path(os.path.abspath(output))
    if out.exists() and not out.is_dir():
        files = {os.path.abspath(os.path.expanduser(s)) for s in inputs if not s.startswith("hf:")}
        globs = [s for s in inputs if not s.startswith("hf:") and has_magic(s)]
        is_input = str(out) in files or any(_glob_matches(g, out) for g in globs)
        which = " (one of the --input files)" if is_input else ""
        raise ValueError(f"--output {out} is a file{which}, not a folder: --output names the folder the shards "
                         f"are written to (created when missing), e.g. --output {sibling_folder(str(out))} "
                         "(nothing was written)")
    written = [out / shard_name(0, 0), out / shard_name(0, 0).replace(".bin", ".json"), out / COMPLETE_MARKER]
    for spec in inputs:
        if not spec.startswith("hf:") and has_magic(spec) and any(_glob_matches(spec, p) for p in written):
            raise ValueError(f"--output {out} is inside --input {spec!r}: the pattern matches the shard files "
                             f"written there, which a rerun would read as inputs: narrow the pattern to "
                             f"the corpus files (e.g. *.jsonl) or put --output outside what it covers "
                             f"(nothing was written)")


def _import_pyarrow_parquet(what: str):
    try:
        import pyarrow.parquet as pq
    except ImportError:
        raise ValueError(f"{what}: reading .parquet needs pyarrow (pip install pyarrow)") from None
    return pq


def _one_line(e: BaseException) -> str:
    return " ".join(str(e).split())  # pyarrow's messages can span lines; ours are one


def _open_parquet(path: str):
    """pq.ParquetFile(path); ValueError naming the file when pyarrow cannot read it (its own message
    says what is wrong but not which file)."""
    pq = _import_pyarrow_parquet(f"input {path}")
    import pyarrow as pa

    try:
        return pq.ParquetFile(path)
    except (pa.ArrowException, OSError) as e:
        raise ValueError(f"input {path}: not a readable parquet file ({_one_line(e)})") from None


def _load_hf(name: str, split: str, what: str):
    try:
        import datasets
    except ImportError:
        raise ValueError(f"{what}: hf: inputs need the `datasets` package (pip install datasets)") from None
    return datasets.load_dataset(name, split=split)


def _parse_hf(spec: str) -> tuple[str, str]:
    body = spec[len("hf:") :]
    name, _, split = body.partition(":")
    if not name:
        raise ValueError(f"--input {spec!r}: expected hf:NAME[:split], e.g. hf:roneneldan/TinyStories:train")
    return name, split or "train"


def plan_units(files: Sequence[str], unit_bytes: int, text_key: str) -> list[Unit]:
    """Deterministic work units for the expanded inputs (same inputs -> same units)."""
    descs: list[dict] = []
    txt_group: list[list] = []
    txt_bytes = 0

    def close_txt() -> None:
        nonlocal txt_group, txt_bytes
        if txt_group:
            descs.append({"kind": "txt", "files": txt_group})
        txt_group, txt_bytes = [], 0

    for f in files:
        if f.startswith("hf:"):
            close_txt()
            name, split = _parse_hf(f)
            ds = _load_hf(name, split, f"--input {f}")
            if text_key not in ds.column_names:
                raise ValueError(f"--input {f}: no column {text_key!r} (--text-key); columns: {ds.column_names}")
            n = len(ds)
            per_row = max(1.0, ds.data.nbytes / max(1, n))
            rows = max(1, int(unit_bytes / per_row))
            for a in range(0, n, rows):
                descs.append({"kind": "hf", "name": name, "split": split, "num_rows": n, "rows": [a, min(n, a + rows)]})
            continue
        size = os.path.getsize(f)
        suffix = Path(f).suffix
        if suffix == ".txt":
            if txt_group and txt_bytes + size > unit_bytes:
                close_txt()
            txt_group.append([f, size])
            txt_bytes += size
            continue
        close_txt()
        if suffix == ".jsonl":
            for a in range(0, max(size, 1), unit_bytes):
                descs.append({"kind": "jsonl", "file": f, "size": size, "bytes": [a, min(size, a + unit_bytes)]})
        else:
            meta = _open_parquet(f).metadata
            start, acc = 0, 0
            for g in range(meta.num_row_groups):
                acc += meta.row_group(g).total_byte_size
                if acc >= unit_bytes or g == meta.num_row_groups - 1:
                    descs.append({"kind": "parquet", "file": f, "size": size, "row_groups": [start, g + 1]})
                    start, acc = g + 1, 0
            if meta.num_row_groups == 0:
                descs.append({"kind": "parquet", "file": f, "size": size, "row_groups": [0, 0]})
    close_txt()
    return [Unit(i, d) for i, d in enumerate(descs)]


# ----------------------------------------------------------------------------- reading


def _decode(raw: bytes, where: str) -> str:
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{where}: not valid UTF-8 ({e})") from None


def _line_of(path: str, pos: int) -> str:
    """'input PATH line N (byte POS)' for the line starting at byte `pos`. Counted only when reporting
    an error: a unit starting mid-file does not know its first line's number, and counting the lines
    before every unit would read the file again for each one."""
    newlines = 0
    with open(path, "rb") as f:
        while f.tell() < pos:
            chunk = f.read(min(2**20, pos - f.tell()))
            if not chunk:
                break
            newlines += chunk.count(b"\n")
    return f"input {path} line {newlines + 1} (byte {pos})"


def _strings(texts: list, where: str, text_key: str) -> list:
    """`texts` (a column's values) once each is a str or None (null); else ValueError naming the type,
    as for a .jsonl record's field (tokenizing it would fail with a TypeError that names nothing)."""
    for text in texts:
        if text is not None and not isinstance(text, str):
            raise ValueError(f"{where}: column {text_key!r} (--text-key) is {type(text).__name__}, "
                             "expected a string")
    return texts


def iter_documents(desc: dict, text_key: str) -> Iterator[str | None]:
    """The documents of one unit in order; None for a record whose text is null."""
    kind = desc["kind"]
    if kind == "txt":
        for path, _ in desc["files"]:
            yield _decode(Path(path).read_bytes(), f"input {path}")
    elif kind == "jsonl":
        path, (start, end) = desc["file"], desc["bytes"]
        with open(path, "rb") as f:
            if start > 0:
                f.seek(start - 1)
                f.readline()  # the line holding byte start-1 belongs to the previous range
            pos = f.tell()
            while pos < end:
                line = f.readline()
                if not line:
                    break
                line_start, pos = pos, pos + len(line)
                if not line.strip():
                    continue
                try:
                    # json.loads decodes the bytes itself: bad UTF-8 is a UnicodeDecodeError, not a JSONDecodeError
                    record = json.loads(line)
                except UnicodeDecodeError as e:
                    raise ValueError(f"{_line_of(path, line_start)}: not valid UTF-8 ({e})") from None
                except json.JSONDecodeError as e:
                    raise ValueError(f"{_line_of(path, line_start)}: not valid JSON ({e})") from None
                if not isinstance(record, dict) or text_key not in record:
                    keys = list(record) if isinstance(record, dict) else type(record).__name__
                    raise ValueError(f"{_line_of(path, line_start)}: no field {text_key!r} (--text-key); found {keys}")
                text = record[text_key]
                if text is not None and not isinstance(text, str):
                    raise ValueError(f"{_line_of(path, line_start)}: field {text_key!r} is {type(text).__name__}, "
                                     "expected a string")
                yield text
    elif kind == "parquet":
        import pyarrow as pa

        path = desc["file"]
        pf = _open_parquet(path)
        if text_key not in pf.schema_arrow.names:
            raise ValueError(f"input {path}: no column {text_key!r} (--text-key); columns: {pf.schema_arrow.names}")
        for g in range(*desc["row_groups"]):
            try:
                texts = pf.read_row_group(g, columns=[text_key]).column(0).to_pylist()
            except (pa.ArrowException, OSError) as e:
                raise ValueError(f"input {path}: row group {g} cannot be read ({_one_line(e)})") from None
            yield from _strings(texts, f"input {path}", text_key)
    elif kind == "hf":
        ds = _load_hf(desc["name"], desc["split"], f"hf:{desc['name']}:{desc['split']}")
        if len(ds) != desc["num_rows"]:
            raise ValueError(
                f"hf:{desc['name']}:{desc['split']} now has {len(ds)} rows, planned with {desc['num_rows']}"
            )
        a, b = desc["rows"]
        for lo in range(a, b, 1024):
            yield from _strings(ds[lo : min(b, lo + 1024)][text_key], f"hf:{desc['name']}:{desc['split']}", text_key)
    else:
        raise AssertionError(f"unknown unit kind {kind}")


# ----------------------------------------------------------------------------- one unit


# Settings that leave the units' plan as it was but change what their shards hold (--text-key) or
# how they are cut (--shard-tokens): a rerun would skip the finished units and record its own values.
_SAME_PLAN_SETTINGS = (("text_key", "--text-key"), ("shard_tokens", "--shard-tokens"))


def _refuse_other_settings(output: Path, now: dict) -> None:
    """ValueError when the shards of `output` were made with another --text-key or --shard-tokens
    (COMPLETE.json, or a header of a run stopped midway), which this run would not redo."""
    headers = sorted(output.glob("shard-*.json"))
    if not headers:
        return
    try:
        source = read_header(headers[0].with_suffix(".bin")).get("source") or {}
    except ValueError:
        source = {}  # a damaged shard is redone (unit_status); the marker may still tell
    changed = _changed_settings(output, source, {k: now[k] for k, _ in _SAME_PLAN_SETTINGS})
    if changed:
        raise ValueError(f"output folder {output} holds shards made with other settings ({changed}): rerun "
                         "with the earlier ones to finish or reuse it, or use a new --output folder")


def _changed_settings(output: Path, source: dict, now: dict) -> str:
    """This run's settings (`now`) that differ from those that made the shards of `output`, e.g.
    '--unit-mb: 64 before, 16 now', read from COMPLETE.json (a finished folder) or a shard header's
    `source` (which records unit_bytes: a run stopped midway has no marker). '' when none is recorded
    or none differs (an input file edited since, say): the caller says what it knows then."""
    try:
        before = {**source, **(read_complete_marker(output) or {})}
    except ValueError:
        before = dict(source)  # a damaged marker: the header's record alone
    changed = [f"{flag}: {before[key]!r} before, {now[key]!r} now" for key, flag in _SAME_PLAN_SETTINGS
               if key in before and key in now and before[key] != now[key]]
    if "unit_bytes" in before and "unit_bytes" in now and before["unit_bytes"] != now["unit_bytes"]:
        old_mb, now_mb = (f"{b / 2**20:.4g}" for b in (before["unit_bytes"], now["unit_bytes"]))
        if old_mb == now_mb:  # apart only in digits not shown: the bytes
            old_mb, now_mb = f"{before['unit_bytes']} bytes", f"{now['unit_bytes']} bytes"
        changed.append(f"--unit-mb: {old_mb} before, {now_mb} now")
    files, now_files = before.get("input_files"), now.get("input_files")
    if isinstance(files, list) and now_files is not None and files != now_files:
        gone, new = [f for f in files if f not in now_files], [f for f in now_files if f not in files]
        diff = [f"{len(fs)} {what} {fs[:3]}" for what, fs in (("gone", gone), ("new", new)) if fs]
        changed.append(f"--input files: {', '.join(diff) or 'the same ones in another order'}")
    return "; ".join(changed)


def shard_name(unit_index: int, part: int) -> str:
    return f"shard-{unit_index:06d}-{part:04d}.bin"


def unit_status(output: Path, unit: Unit, fingerprint: str, now: dict | None = None) -> str:
    """'complete', 'partial' (some files of the unit exist) or 'absent'.

    Raises ValueError when the folder holds this unit index from other inputs or another tokenizer,
    naming the settings that differ from `now` ({"unit_bytes", "input_files"}) where it can.
    """
    prefix = f"shard-{unit.index:06d}-"
    bins = sorted(output.glob(prefix + "*.bin"))
    headers = sorted(output.glob(prefix + "*.json"))
    if not bins and not headers:
        return "absent"
    parts: set[int] = set()
    n_parts = None
    for h in headers:
        bin_path = h.with_suffix(".bin")
        try:
            header = read_header(bin_path)
        except ValueError:
            return "partial"  # truncated or missing data: redo the unit
        if header["tokenizer_fingerprint"] != fingerprint:
            raise ValueError(
                f"output folder {output} holds {h.name} made by tokenizer {header['tokenizer_fingerprint']!r}, "
                f"not {fingerprint!r} (--tokenizer): use a new --output folder for another tokenizer"
            )
        source = header.get("source") or {}
        if source.get("unit") != unit.desc:
            changed = _changed_settings(output, source, now or {})
            if changed:
                raise ValueError(f"output folder {output} holds {h.name} made with other settings ({changed}): "
                                 f"rerun with the earlier ones to reuse it, or use a new --output folder")
            raise ValueError(
                f"output folder {output} holds {h.name} made from other inputs ({source.get('unit')}), "
                f"not {unit.desc}: use a new --output folder for a different input set"
            )
        parts.add(int(source["part"]))
        n_parts = int(source["parts"])
    if n_parts is not None and parts == set(range(n_parts)) and len(bins) == n_parts:
        return "complete"
    return "partial"


_WORKER_TOKENIZER: Any = None


def _init_worker(tokenizer_spec: str) -> None:
    global _WORKER_TOKENIZER
    _WORKER_TOKENIZER = build_tokenizer(tokenizer_spec)


def process_unit(job: tuple[str, Unit, str, int, int]) -> dict:
    """Tokenize one unit into its shards (runs in a pool worker). Returns its counts. `unit_bytes` is
    recorded in the headers: a rerun with another --unit-mb is told so (unit_status)."""
    output_s, unit, text_key, shard_tokens, unit_bytes = job
    output, tok = Path(output_s), _WORKER_TOKENIZER
    for stale in list(output.glob(f"shard-{unit.index:06d}-*")):
        stale.unlink()  # a partial earlier attempt: its parts are rewritten from the start
    counts: list[int] = []
    pending: list[np.ndarray] = []
    n_pending = docs = nulls = text_chars = 0

    def write_parts(final: bool) -> None:
        nonlocal pending, n_pending
        buf = np.concatenate(pending) if pending else np.empty(0, np.uint32)
        while len(buf) >= shard_tokens or (final and (len(buf) or not counts)):
            piece, buf = buf[:shard_tokens], buf[shard_tokens:]
            counts.append(write_shard_data(output / shard_name(unit.index, len(counts)), piece, tok.vocab_size))
        pending, n_pending = [buf], len(buf)

    batch: list[str] = []
    batch_bytes = 0
    for text in iter_documents(unit.desc, text_key):
        if text is None:
            nulls += 1
            continue
        batch.append(text)
        batch_bytes += len(text)
        docs += 1
        if batch_bytes >= _ENCODE_BATCH_BYTES:
            pending.append(tok.encode_documents(batch))
            n_pending += len(pending[-1])
            text_chars += batch_bytes
            batch, batch_bytes = [], 0
            if n_pending >= shard_tokens:
                write_parts(final=False)
    if batch:
        pending.append(tok.encode_documents(batch))
        text_chars += batch_bytes
    write_parts(final=True)
    # Headers last, in part order: the unit counts as complete only once every part has one.
    for k, count in enumerate(counts):
        source = {"unit": unit.desc, "part": k, "parts": len(counts), "unit_bytes": unit_bytes,
                  "text_key": text_key, "shard_tokens": shard_tokens}
        write_shard_header(output / shard_name(unit.index, k), make_header(tok, count, source))
    return {"documents": docs, "null_documents": nulls, "tokens": sum(counts), "text_chars": text_chars}


# ----------------------------------------------------------------------------- folder lock and marker


@contextmanager
def output_lock(output: Path):
    """Hold an exclusive, non-blocking flock on `output/.prepare_data.lock` for the whole run.

    A second run into the same folder gets a ValueError naming the folder and the holder's pid. The
    kernel drops the lock when its holder exits or dies, so a lock file left by a killed run never
    blocks; it is not deleted (deleting it could let two runs lock two different files)."""
    lock = output / LOCK_NAME
    stack = ExitStack()
    try:
        stack.enter_context(file_lock(lock, 0.0, "scripts/prepare_data.py"))
    except TimeoutError:
        try:
            holder = lock.read_text(encoding="ascii").split()
        except (OSError, UnicodeDecodeError):
            holder = []
        who = f"pid {holder[0]} on host {holder[1]}" if len(holder) >= 2 else "a process (pid not yet written)"
        raise ValueError(
            f"output folder {output} is in use by another scripts/prepare_data.py run ({who} holds {lock}): "
            f"wait for it to finish, or use another --output folder"
        ) from None
    except OSError as e:  # after TimeoutError, one of its subclasses: a folder this user cannot write in
        raise ValueError(f"cannot write in --output {output}: {e.strerror or e} (creating {LOCK_NAME})") from None
    with stack:
        lock.write_text(f"{os.getpid()} {socket.gethostname()}\n", encoding="ascii")
        yield


def folder_shards(output: Path) -> list[tuple[str, dict]]:
    """[(NAME.bin, validated header)] of every shard of `output` that has a header, by name."""
    return [(h.with_suffix(".bin").name, read_header(h.with_suffix(".bin")))
            for h in sorted(output.glob("shard-*.json"))]


def _marker_info(shards: list[tuple[str, dict]], **made_from: Any) -> dict:
    fps = sorted({h["tokenizer_fingerprint"] for _, h in shards})
    return {
        "format": 1,
        **made_from,
        "tokenizer": fps[0] if len(fps) == 1 else fps,
        "shards": len(shards),
        "tokens": sum(int(h["count"]) for _, h in shards),
        "shard_list": [[name, int(h["count"])] for name, h in shards],
    }


def mark_complete(output: str | Path, log: Callable[[str], None] | None = print) -> dict:
    """Write COMPLETE.json for a folder of prepare_data shards made before markers existed, whose
    inputs are gone (so a rerun cannot add it). Refuses when a unit lacks parts or a unit index in
    0..last is missing; units after the last one present cannot be checked: the user vouches."""
    output = Path(output).expanduser()
    if not output.is_dir():
        raise ValueError(f"--output {output}: {'a file, not a folder' if output.exists() else 'no such folder'}")
    with output_lock(output):
        shards = folder_shards(output)
        if not shards:
            raise ValueError(f"output folder {output} holds no shards (shard-*.bin + .json) to mark complete")
        parts: dict[int, set[int]] = {}
        wanted: dict[int, int] = {}
        for name, h in shards:
            if not is_prepare_data_shard(h) or not re.fullmatch(r"shard-\d{6}-\d{4}\.bin", name):
                raise ValueError(f"output folder {output}: {name} was not made by scripts/prepare_data.py; "
                                 f"--mark-complete marks only prepare_data folders")
            unit = int(name[len("shard-") : len("shard-000000")])
            parts.setdefault(unit, set()).add(int(h["source"].get("part", -1)))
            wanted[unit] = int(h["source"]["parts"])
        problems = [f"unit {u} has parts {sorted(p)} of {wanted[u]}"
                    for u, p in sorted(parts.items()) if p != set(range(wanted[u]))]
        gaps = sorted(set(range(max(parts) + 1)) - set(parts))
        if gaps:
            problems.append(f"unit(s) {gaps[:10]} missing")
        if problems:
            raise ValueError(
                f"output folder {output} is not complete, not marking it: {'; '.join(problems[:10])}. "
                f"Rerun the scripts/prepare_data.py command that made it"
            )
        info = _marker_info(shards, made_by="scripts/prepare_data.py --mark-complete", inputs=None, units=len(parts))
        write_complete_marker(output, info)
    if log is not None:
        log(f"prepare_data: marked {output} complete on your word: {len(shards)} shard(s) of {len(parts)} unit(s), "
            f"{info['tokens']} tokens (units after unit {max(parts)} cannot be checked)")
    return info


# ----------------------------------------------------------------------------- driver


def prepare(
    inputs: Sequence[str],
    output: str | Path,
    tokenizer: str = "bytes",
    workers: int = 1,
    text_key: str = "text",
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    unit_bytes: int = DEFAULT_UNIT_BYTES,
    log: Callable[[str], None] | None = print,
) -> PrepareStats:
    """Tokenize `inputs` into shards under `output`; skips units already complete. Returns counts."""
    if workers < 1:
        raise ValueError(f"--workers must be >= 1, got {workers}")
    if shard_tokens < 1:
        raise ValueError(f"--shard-tokens must be >= 1, got {shard_tokens}")
    t0 = time.perf_counter()
    output = Path(output).expanduser()
    check_output(inputs, output)
    tok = build_tokenizer(tokenizer)
    created = not output.exists()
    try:
        output.mkdir(parents=True, exist_ok=True)
    except OSError as e:  # e.g. under a file (/dev/null/x) or in a read-only file system (/proc/x)
        raise ValueError(f"cannot create --output {output}: {e.strerror or e}") from None
    with output_lock(output):
        try:
            return _prepare_locked(inputs, output, tok, tokenizer, workers, text_key, shard_tokens, unit_bytes,
                                   log, t0)
        except BaseException:  # any failure, Ctrl-C too: a bare new folder is nothing to resume
            if created:
                _remove_if_bare(output)
            raise


def _remove_if_bare(output: Path) -> None:
    """Remove a folder this run created when it failed before writing anything a rerun could resume
    from (only the lock file is in it). Called while holding the lock: a run that opens the lock
    file before the unlink fails to lock it; one after it makes the rmdir fail, keeping its folder."""
    if [p.name for p in output.iterdir()] != [LOCK_NAME]:
        return
    try:
        (output / LOCK_NAME).unlink()
        output.rmdir()
    except OSError:
        pass  # another run has started writing here: its folder now


def _prepare_locked(inputs, output: Path, tok, tokenizer: str, workers: int, text_key: str, shard_tokens: int,
                    unit_bytes: int, log, t0: float) -> PrepareStats:
    files = expand_inputs(inputs)
    units = plan_units(files, unit_bytes, text_key)
    planned = {shard_name(u.index, 0)[: len("shard-000000")] for u in units}
    foreign = sorted(p.name for p in output.glob("shard-*.json") if p.name[: len("shard-000000")] not in planned)
    now = {"unit_bytes": unit_bytes, "input_files": files, "text_key": text_key, "shard_tokens": shard_tokens}
    _refuse_other_settings(output, now)
    if foreign:
        try:
            source = read_header((output / foreign[0]).with_suffix(".bin")).get("source") or {}
        except ValueError:
            source = {}  # a damaged shard: the marker may still tell
        changed = _changed_settings(output, source, now)
        raise ValueError(
            f"output folder {output} holds shards beyond this input set ({foreign[:3]}...)"
            + (f", made with other settings ({changed}): rerun with the earlier ones to reuse it, or"
               if changed else ":")
            + " use a new --output folder for a different input set"
        )
    for pattern in (".shard-*.tmp-*", f".{COMPLETE_MARKER}.tmp-*"):
        for tmp in output.glob(pattern):
            tmp.unlink()  # temp files of an interrupted writer (we hold the lock: no live one)
    stats = PrepareStats(units=len(units))
    todo = []
    for u in units:
        if unit_status(output, u, tok.fingerprint, now) == "complete":
            stats.skipped += 1
        else:
            todo.append((str(output), u, text_key, shard_tokens, unit_bytes))
    if todo:
        remove_complete_marker(output)  # the folder is about to change: incomplete until the end

    def account(result: dict) -> None:
        stats.done += 1
        for key in ("documents", "null_documents", "tokens", "text_chars"):
            setattr(stats, key, getattr(stats, key) + result[key])
        if log is not None:
            log(f"  [{stats.done}/{len(todo)}] {result['documents']} docs -> {result['tokens']} tokens")

    if todo and (workers == 1 or len(todo) == 1):
        _init_worker(tokenizer)
        for job in todo:
            account(process_unit(job))
    elif todo:
        # spawn: workers import only numpy/tokenizers (no torch, no inherited thread pools). A
        # process pool executor (unlike multiprocessing.Pool) fails instead of hanging when a
        # worker dies; an error inside a unit is re-raised here with its message.
        with ProcessPoolExecutor(
            min(workers, len(todo)), mp_context=mp.get_context("spawn"),
            initializer=_init_worker, initargs=(tokenizer,),
        ) as pool:
            futures = [pool.submit(process_unit, job) for job in todo]
            try:
                for fut in as_completed(futures):
                    account(fut.result())
            except BaseException:
                for fut in futures:
                    fut.cancel()
                raise
    shards = folder_shards(output)
    stats.shards = [name for name, _ in shards]
    info = _marker_info(shards, made_by="scripts/prepare_data.py", inputs=list(inputs), input_files=files,
                        tokenizer_spec=tokenizer, text_key=text_key, shard_tokens=shard_tokens,
                        unit_bytes=unit_bytes, units=len(units))
    stats.total_tokens = info["tokens"]
    if info["tokens"] < MIN_TOKENS:
        _refuse_too_few_tokens(output, inputs, files, stats, [job[1] for job in todo])
    if todo or read_complete_marker(output) != info:
        write_complete_marker(output, info)  # the last act: from now on the folder trains
    stats.seconds = time.perf_counter() - t0
    if log is not None:
        log(stats.summary(output))
    return stats


def _refuse_too_few_tokens(output: Path, inputs: Sequence[str], files: list[str], stats: PrepareStats,
                           written: list[Unit]) -> None:
    """Raise ValueError for a dataset training would refuse, after removing the shards this run
    wrote (no marker was written; units complete before this run are left as they were)."""
    for unit in written:
        for path in output.glob(f"shard-{unit.index:06d}-*"):
            path.unlink()
    shown = ", ".join(files[:5]) + (f" and {len(files) - 5} more" if len(files) > 5 else "")
    nulls = f" ({stats.null_documents} null)" if stats.null_documents else ""
    raise ValueError(
        f"--input {' '.join(inputs)} ({len(files)} file(s): {shown}) gave {stats.total_tokens} token(s) from "
        f"{stats.documents} document(s){nulls}; training needs at least training.seq_len + 1 tokens (never "
        f"fewer than {MIN_TOKENS}; 2049 for seq_len = 2048): check the files and --text-key. {output} was not "
        f"marked complete")

