"""Data: tokenizers, token shards, the embedded default corpus and the world-size-independent stream.

`build_tokenizer(spec)` and `build_dataset(data_cfg, tokenizer)` are what the trainer calls, then
`SampleStream(source, seq_len, seed, dp_rank, dp_size, local_batch_size)`. SampleStream (which needs
torch) is imported lazily, so data preparation workers start without importing torch.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

from .dataset_hint import dataset_problem
from .embedded import build_embedded
from .shards import TokenSource
from .tokenizer import ByteTokenizer, HFTokenizer, Tokenizer, build_tokenizer

if TYPE_CHECKING:
    from .stream import SampleStream

__all__ = [
    "ByteTokenizer",
    "HFTokenizer",
    "SampleStream",
    "TokenSource",
    "Tokenizer",
    "build_dataset",
    "build_tokenizer",
]


def build_dataset(data_cfg: Any, tokenizer: Tokenizer, rank: int = 0) -> TokenSource:
    """The run's tokens: data.dataset = 'embedded' (built on first use) or a folder of shards.

    Raises ValueError naming data.dataset when the folder is missing or holds no shards, and naming
    the shard and both fingerprints when a shard was made by another tokenizer.
    """
    spec = data_cfg.dataset
    if spec == "embedded":
        folder = build_embedded(data_cfg.cache_dir, tokenizer, rank=rank)
        return TokenSource(folder, tokenizer.fingerprint, name="embedded (Python stdlib sources)")
    folder = Path(spec).expanduser()
    if not folder.is_dir():
        # The command names the run's own tokenizer: shards from another one would be refused.
        spec_of_tok = "bytes" if isinstance(tokenizer, ByteTokenizer) else str(getattr(tokenizer, "path", "TOKENIZER"))
        found, fix = dataset_problem(spec, spec_of_tok)
        raise ValueError(f"data.dataset: {spec!r}: {found}; {fix}")
    return TokenSource(folder, tokenizer.fingerprint)


def __getattr__(name: str) -> Any:
    # PEP 562 lazy import: only the training process pays for torch.
    if name == "SampleStream":
        from .stream import SampleStream

        return SampleStream
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
