"""What defines a run's global sample stream and its optimisation trajectory, recorded in every
checkpoint so that a resume continues the stream it saved, not a different one.

The stream state is one integer (the next global sample index, stream.py). That integer means the
same samples only while the dataset, the tokenizer, seq_len (the windows), the seed (their order)
and the global batch (samples per optimizer step) are the ones the checkpoint was saved with. The
number of DP ranks and local_batch_size are not part of it: the stream is defined without them.
data.document_mask is not either: it changes the attention, not which samples come next.

An identity is a small JSON-able dict. Keys in COMPARED are checked on resume; the others describe
(dataset_name, dataset_tokens). A key missing on either side (a checkpoint from another titankit
version) is not compared, so adding a key later does not refuse every older checkpoint.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

# Bump when stream.py orders windows differently (permutation, window layout): the same
# next_index would then name other samples.
STREAM_VERSION = 1

# identity key -> the config key that sets it (named in errors and warnings)
COMPARED: dict[str, str] = {
    "stream_version": "titankit's sample order (trainer/data/stream.py)",
    "dataset": "data.dataset",
    "tokenizer": "data.tokenizer",
    "seq_len": "training.seq_len",
    "global_batch_size": "training.global_batch_size",
    "seed": "run.seed",
}


def config_keys() -> str:
    """The config keys an identity covers, for messages: 'data.dataset, ..., run.seed'."""
    return ", ".join(v for k, v in COMPARED.items() if k != "stream_version")


def stream_identity(source: Any, seq_len: int, global_batch_size: int, seed: int,
                    dataset_spec: str | None = None, tokenizer_spec: str | None = None) -> dict[str, Any]:
    """The identity of the stream a run reads. `global_batch_size` in sequences, resolved (not -1).
    The specs (data.dataset, data.tokenizer as configured) only describe: a refused resume names the
    flags that restore them."""
    if global_batch_size < 1:
        raise ValueError(f"stream_identity: global_batch_size must be resolved (>= 1), "
                         f"got {global_batch_size}")
    return {
        "stream_version": STREAM_VERSION,
        "dataset": source.content_fingerprint,
        "dataset_name": str(getattr(source, "name", "?")),
        "dataset_tokens": int(len(source)),
        "tokenizer": source.fingerprint,
        "seq_len": int(seq_len),
        "global_batch_size": int(global_batch_size),
        "seed": int(seed),
        **({"dataset_spec": dataset_spec} if dataset_spec is not None else {}),
        **({"tokenizer_spec": tokenizer_spec} if tokenizer_spec is not None else {}),
    }


def dumps(identity: dict[str, Any]) -> str:
    """The form a checkpoint stores: one JSON string (a single bytes item in DCP)."""
    return json.dumps(identity, sort_keys=True)


def loads(text: Any, where: str, what: str = "data-stream identity") -> dict[str, Any]:
    """Parse a stored identity (trainer/models/identity.py's too: `what` names it); `where` names its
    file for the error."""
    try:
        identity = json.loads(text)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{where}: the recorded {what} is not valid JSON ({exc}): {text!r:.200}") from exc
    if not isinstance(identity, dict):
        raise ValueError(f"{where}: the recorded {what} is not a JSON object: {text!r:.200}")
    return identity


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The compared keys whose values differ (in COMPARED order); keys either side lacks are skipped."""
    return [k for k in COMPARED if k in saved and k in current and saved[k] != current[k]]


def _shown(identity: dict[str, Any], key: str) -> str:
    value = identity[key]
    if key == "dataset":
        # A fingerprint alone tells a user nothing: add where it came from and its size.
        tokens = identity.get("dataset_tokens")
        size = f", {tokens:,} tokens" if isinstance(tokens, int) else ""
        return f"{value!r} ({identity.get('dataset_name', '?')}{size})"
    return repr(value)


def describe(saved: dict[str, Any], current: dict[str, Any], keys: list[str],
             labels: tuple[str, str] = ("saved", "current")) -> list[str]:
    """One line per differing key: '<config key> (<identity key>): saved X, current Y'."""
    a, b = labels
    return [f"{COMPARED[k]} ({k}): {a} {_shown(saved, k)}, {b} {_shown(current, k)}" for k in keys]


def resume_hint(saved: dict[str, Any], keys: list[str]) -> str:
    """The command-line overrides that restore the saved values: config values, and the dataset and
    tokenizer as the saving run configured them (checkpoints from before that record: the built-in
    byte tokenizer only, which its fingerprint names)."""
    flags = []
    for k in keys:
        if k in ("seq_len", "global_batch_size", "seed"):
            value = saved[k]
        elif k in ("dataset", "tokenizer") and f"{k}_spec" in saved:
            value = saved[f"{k}_spec"]
        elif k == "tokenizer" and saved.get("tokenizer") == "bytes-v1":
            value = "bytes"
        else:
            continue
        text = str(value)
        flags.append(f"--{COMPARED[k]}={shlex.quote(text) if text else repr(text)}")
    return " ".join(flags)
