"""Tokenizers: the built-in byte-level one (no files) and HF `tokenizer.json` via `tokenizers`.

Both expose the same small interface (see `Tokenizer`): `vocab_size`, `bos_id`, `eos_id`,
`encode(text) -> list[int]` (no special tokens added), `decode(ids) -> str` (special tokens
dropped), `fingerprint` (a short stable identity that token shards record, so a run never trains
on shards made by another tokenizer) and `encode_documents(texts) -> np.ndarray`, the fast path
used to build shards: every document's tokens followed by EOS, concatenated.
"""

from __future__ import annotations

import functools
import hashlib
import json
from pathlib import Path
from typing import Protocol, Sequence

import numpy as np

# Special-token spellings of the common tokenizer families, most specific first.
# Llama-3, Llama-2/Mistral (SentencePiece), GPT-2/NeoX/Pythia, Gemma, generic.
EOS_CANDIDATES = ("<|end_of_text|>", "</s>", "<|endoftext|>", "<eos>", "<|eos|>", "[EOS]")
BOS_CANDIDATES = ("<|begin_of_text|>", "<s>", "<|startoftext|>", "<bos>", "<|bos|>", "[BOS]")


class Tokenizer(Protocol):
    """What the data pipeline needs from a tokenizer."""

    vocab_size: int
    bos_id: int
    eos_id: int
    fingerprint: str

    def encode(self, text: str) -> list[int]: ...

    def decode(self, ids: Sequence[int]) -> str: ...

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray: ...


def _append_eos(pieces: list[np.ndarray], eos_id: int) -> np.ndarray:
    """Concatenate per-document token arrays with EOS after each one -> (sum(len) + n_docs,) uint32."""
    lengths = np.fromiter((len(p) for p in pieces), dtype=np.int64, count=len(pieces))
    flat = np.concatenate(pieces).astype(np.uint32, copy=False) if pieces else np.empty(0, np.uint32)
    # np.insert places each EOS before the given index: the cumulative lengths are the doc ends.
    return np.insert(flat, np.cumsum(lengths), np.uint32(eos_id))


class ByteTokenizer:
    """UTF-8 bytes are tokens 0..255; BOS = 256, EOS = 257; vocab_size = 258."""

    vocab_size = 258
    bos_id = 256
    eos_id = 257
    fingerprint = "bytes-v1"

    def encode(self, text: str) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int]) -> str:
        arr = np.asarray(ids, dtype=np.int64)
        # Special tokens are dropped (as HF's decode does by default); invalid UTF-8 is replaced.
        return arr[arr < 256].astype(np.uint8).tobytes().decode("utf-8", errors="replace")

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        # One frombuffer over the joined bytes instead of a Python int per byte: ~1 GB/s.
        encoded = [t.encode("utf-8") for t in texts]
        flat = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        lengths = np.fromiter((len(b) for b in encoded), dtype=np.int64, count=len(encoded))
        return np.insert(flat.astype(np.uint32), np.cumsum(lengths), np.uint32(self.eos_id))

    def __repr__(self) -> str:
        return "ByteTokenizer()"


def _token_content(entry: object) -> str | None:
    """A tokenizer_config.json special-token entry is a string or {"content": ...}."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict) and isinstance(entry.get("content"), str):
        return entry["content"]
    return None


class HFTokenizer:
    """A HF `tokenizer.json` loaded with the `tokenizers` package.

    BOS/EOS come from a `tokenizer_config.json` beside the file when it names them, else from the
    known spellings in EOS_CANDIDATES / BOS_CANDIDATES. Without a BOS token (GPT-2 style) BOS is
    the EOS token, the convention of those tokenizers.
    """

    def __init__(self, path: str | Path):
        from tokenizers import Tokenizer as _HFTok

        self.path = Path(path).expanduser()
        if not self.path.is_file():
            raise ValueError(
                f"tokenizer file {self.path} does not exist (data.tokenizer = 'bytes' or a tokenizer.json path)"
            )
        raw = self.path.read_bytes()
        try:
            self._tok = _HFTok.from_str(raw.decode("utf-8"))
        except Exception as e:  # tokenizers raises its own Exception type for bad JSON/schema
            raise ValueError(f"tokenizer file {self.path} is not a valid HF tokenizer.json: {e}") from e
        # A tokenizer.json may carry truncation/padding settings meant for fine-tuning; for
        # pretraining they would silently cut documents, so they are switched off.
        self._tok.no_truncation()
        self._tok.no_padding()
        self.fingerprint = "sha256:" + hashlib.sha256(raw).hexdigest()[:16]
        self.vocab_size = int(self._tok.get_vocab_size(with_added_tokens=True))
        self.eos_id, self.bos_id = self._find_specials()
        self._special_ids = {self.eos_id, self.bos_id}

    def _find_specials(self) -> tuple[int, int]:
        named: dict[str, str] = {}
        cfg_path = self.path.parent / "tokenizer_config.json"
        if cfg_path.is_file():
            try:
                cfg = json.loads(cfg_path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as e:
                raise ValueError(f"{cfg_path} (beside {self.path}) is not valid JSON: {e}") from e
            if not isinstance(cfg, dict):
                raise ValueError(f"{cfg_path} (beside {self.path}) is not a JSON object")
            for key in ("eos_token", "bos_token"):
                content = _token_content(cfg.get(key))
                if content is not None:
                    named[key] = content
                elif cfg.get(key) is not None:  # null is HF's "none"; anything else is a mistake
                    raise ValueError(
                        f"{cfg_path}: {key} {json.dumps(cfg[key])} is not a token: write its text, e.g. "
                        f"\"{key}\": \"<|end_of_text|>\", or {{\"content\": \"...\"}}"
                    )

        def lookup(key: str, candidates: Sequence[str]) -> int | None:
            if key in named:
                tid = self._tok.token_to_id(named[key])
                if tid is None:
                    raise ValueError(
                        f"{cfg_path} names {key} {named[key]!r}, which is not in the vocabulary of {self.path}"
                    )
                return int(tid)
            for text in candidates:
                tid = self._tok.token_to_id(text)
                if tid is not None:
                    return int(tid)
            return None

        eos = lookup("eos_token", EOS_CANDIDATES)
        if eos is None:
            raise ValueError(
                f"cannot determine the EOS token of {self.path}: none of {list(EOS_CANDIDATES)} is in its "
                f"vocabulary and no tokenizer_config.json beside it names an eos_token; add one of them "
                f"as a special token or write a tokenizer_config.json with \"eos_token\""
            )
        bos = lookup("bos_token", BOS_CANDIDATES)
        return eos, eos if bos is None else bos

    def encode(self, text: str) -> list[int]:
        return list(self._tok.encode(text, add_special_tokens=False).ids)

    def decode(self, ids: Sequence[int]) -> str:
        return self._tok.decode([int(i) for i in ids], skip_special_tokens=True)

    def encode_documents(self, texts: Sequence[str]) -> np.ndarray:
        # Batch encoding runs on the tokenizers' own thread pool; the _fast variant skips offsets
        # (tokenizers >= 0.21); older versions only have encode_batch.
        encode_batch = getattr(self._tok, "encode_batch_fast", self._tok.encode_batch)
        encs = encode_batch(list(texts), add_special_tokens=False)
        return _append_eos([np.asarray(e.ids, dtype=np.uint32) for e in encs], self.eos_id)

    def __repr__(self) -> str:
        return f"HFTokenizer({str(self.path)!r}, vocab_size={self.vocab_size}, eos_id={self.eos_id})"


def build_tokenizer(spec: str) -> ByteTokenizer | HFTokenizer:
    """'bytes' -> the built-in byte tokenizer; otherwise the path of a HF tokenizer.json."""
    if spec == "bytes":
        return ByteTokenizer()
    path = Path(spec).expanduser()
    if path.is_dir() and (path / "tokenizer.json").is_file():
        path = path / "tokenizer.json"
    if not path.is_file():
        raise ValueError(
            f"data.tokenizer: {spec!r} is neither 'bytes' nor an existing tokenizer.json file (looked at {path})"
        )
    # A launch parses the file twice otherwise (validate_config's vocabulary check, then the Trainer):
    # a Llama-3 tokenizer.json is 9 MB. Keyed by the file's identity, so a rewritten file is re-read.
    st = path.stat()
    return _load_hf(str(path), st.st_mtime_ns, st.st_size)


@functools.lru_cache(maxsize=4)
def _load_hf(path: str, mtime_ns: int, size: int) -> HFTokenizer:
    return HFTokenizer(Path(path))
