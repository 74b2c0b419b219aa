"""The embedded default corpus: the running Python's standard library sources, tokenized once.

It needs no download and exists on every machine: the `.py` files under sysconfig's "stdlib"
path (test folders and site-packages skipped), each file one document, capped to a deterministic
subset of `max_bytes` of text. It is tokenized on first use into token shards under
`{cache_dir}/embedded/{name}/`, where the name is keyed by the tokenizer fingerprint, the Python
version and a hash of the file list, so any change of those builds a new cache.

Several ranks (and nodes sharing a file system) may start at once: one process per file system
takes an exclusive `flock` and builds into a temporary folder that it renames into place when
complete; the others wait on the lock (bounded by `timeout_s`) and then find the finished folder.
A crashed builder leaves only a temporary folder, which the next builder removes.
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import socket
import sys
import sysconfig
import time
from pathlib import Path

import numpy as np

from trainer.files import file_lock
from trainer.log import logger

from .shards import write_shard

FORMAT_VERSION = 1
DEFAULT_MAX_BYTES = 32 * 2**20
DEFAULT_SHARD_TOKENS = 2**25
_SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}
_MARKER = "COMPLETE.json"


def stdlib_files(
    max_bytes: int = DEFAULT_MAX_BYTES, root: str | Path | None = None
) -> tuple[Path, list[tuple[str, int]]]:
    """The corpus file list -> (stdlib root, [(posix relative path, size in bytes)] sorted by path).

    When the sources exceed `max_bytes`, a deterministic subset is kept: files in the order of a
    hash of their path (spread over the whole library, not its first letters) while they fit.
    """
    root = Path(root if root is not None else sysconfig.get_paths()["stdlib"])
    files: list[tuple[str, int]] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d not in _SKIP_DIRS)
        for name in sorted(filenames):
            if name.endswith(".py"):
                path = Path(dirpath) / name
                files.append((path.relative_to(root).as_posix(), path.stat().st_size))
    if not files:
        raise ValueError(f"embedded corpus: no .py files under the standard library folder {root}")
    total = sum(size for _, size in files)
    if total > max_bytes:
        kept, used = [], 0
        for rel, size in sorted(files, key=lambda f: hashlib.sha256(f[0].encode()).hexdigest()):
            if used + size <= max_bytes:
                kept.append((rel, size))
                used += size
        files = kept
    if not files:
        raise ValueError(f"embedded corpus: max_bytes={max_bytes} is smaller than every file under {root}")
    return root, sorted(files)


def corpus_key(tokenizer, files: list[tuple[str, int]], max_bytes: int) -> str:
    """Cache folder name: changes with the tokenizer, the Python version and the file list."""
    ident = {
        "format": FORMAT_VERSION,
        "tokenizer": tokenizer.fingerprint,
        "python": [platform.python_implementation(), sys.version],
        "files": files,
        "max_bytes": max_bytes,
    }
    digest = hashlib.sha256(json.dumps(ident, sort_keys=True).encode()).hexdigest()[:16]
    return f"stdlib-py{sys.version_info.major}{sys.version_info.minor}-{digest}"




def _build(folder: Path, root: Path, files: list[tuple[str, int]], tokenizer, shard_tokens: int) -> dict:
    """Tokenize the files (one document each, EOS after each) into shards of <= shard_tokens tokens."""
    t0 = time.perf_counter()
    pending: list[np.ndarray] = []
    n_pending = n_shards = n_tokens = n_bytes = 0

    def flush(final: bool) -> None:
        nonlocal pending, n_pending, n_shards, n_tokens
        buf = np.concatenate(pending) if pending else np.empty(0, np.uint32)
        while len(buf) >= shard_tokens or (final and len(buf)):
            piece, buf = buf[:shard_tokens], buf[shard_tokens:]
            write_shard(folder / f"shard-{n_shards:05d}.bin", piece, tokenizer)
            n_shards += 1
            n_tokens += len(piece)
        pending, n_pending = [buf], len(buf)

    batch: list[str] = []
    batch_bytes = 0
    for i, (rel, _) in enumerate(files):
        raw = (root / rel).read_bytes()
        n_bytes += len(raw)
        batch.append(raw.decode("utf-8", errors="replace"))
        batch_bytes += len(raw)
        # Encode in ~4 MB batches so an HF tokenizer's thread pool gets work and memory stays bounded.
        if batch_bytes >= 4 * 2**20 or i == len(files) - 1:
            tokens = tokenizer.encode_documents(batch)
            pending.append(tokens)
            n_pending += len(tokens)
            batch, batch_bytes = [], 0
            if n_pending >= shard_tokens:
                flush(final=False)
    flush(final=True)
    return {
        "files": len(files),
        "bytes": n_bytes,
        "tokens": n_tokens,
        "shards": n_shards,
        "seconds": round(time.perf_counter() - t0, 3),
    }


def build_embedded(
    cache_dir: str | Path,
    tokenizer,
    rank: int = 0,
    max_bytes: int = DEFAULT_MAX_BYTES,
    shard_tokens: int = DEFAULT_SHARD_TOKENS,
    timeout_s: float = 1800.0,
    stdlib_root: str | Path | None = None,
) -> Path:
    """Return the folder of the embedded corpus' shards, building it first when needed.

    Safe to call from every rank at once (see the module docstring); `rank` only decides who logs.
    """
    root, files = stdlib_files(max_bytes, stdlib_root)
    name = corpus_key(tokenizer, files, max_bytes)
    base = Path(cache_dir).expanduser() / "embedded"
    final = base / name
    if (final / _MARKER).exists():
        return final
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise ValueError(f"data.cache_dir: cannot create {base}: {e}") from e
    busy = (f"embedded corpus: waited {timeout_s:.0f}s for {base / f'{name}.lock'} held by another process "
            "building the corpus; if no such process runs, delete the lock file, or set data.cache_dir elsewhere")
    # Where locks are refused (some network file systems), the atomic renames still keep the cache
    # consistent, at the cost of several processes building it.
    with file_lock(base / f"{name}.lock", timeout_s, "embedded corpus", busy):
        if (final / _MARKER).exists():
            return final
        for stale in base.glob(f"{name}.tmp-*"):
            shutil.rmtree(stale, ignore_errors=True)  # left by a builder that died: we hold the lock
        tmp = base / f"{name}.tmp-{socket.gethostname()}-{os.getpid()}"
        tmp.mkdir()
        try:
            info = _build(tmp, root, files, tokenizer, shard_tokens)
            info.update(python=sys.version, stdlib=str(root), tokenizer=tokenizer.fingerprint, max_bytes=max_bytes)
            (tmp / _MARKER).write_text(json.dumps(info, indent=1, sort_keys=True))
            try:
                os.rename(tmp, final)
            except OSError:
                if not (final / _MARKER).exists():
                    raise
                # Another builder (lock-less file system) finished first: keep its folder.
        finally:
            if tmp.exists():
                shutil.rmtree(tmp, ignore_errors=True)
    logger.info(
        "embedded corpus (rank %d): %d stdlib files, %.1f MB -> %d tokens in %d shard(s), %.2fs, at %s",
        rank, info["files"], info["bytes"] / 1e6, info["tokens"], info["shards"], info["seconds"], final,
    )
    return final
