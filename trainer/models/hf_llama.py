"""Llama-3 weights in Hugging Face's layout: parameter names, the RoPE row order of wq/wk, config.json.

titankit's Llama keeps Meta's names and Meta's RoPE pairing: the two elements rotated together are
adjacent rows of wq/wk (2i, 2i+1) within each head. Hugging Face's LlamaForCausalLM rotates element i
with element i + head_dim/2 ("rotate_half"), so its wq/wk hold, per head, the even rows of Meta's
first and the odd rows second. Both compute the same function; only the rows move. Used by
scripts/convert_checkpoint.py.
"""

from __future__ import annotations

import math
import re
from typing import Any

import torch

from trainer.models.llama_args import LlamaArgs

_LAYER = re.compile(r"layers\.(\d+)\.(.+)")
_HF_LAYER = re.compile(r"model\.layers\.(\d+)\.(.+)")

# Per-layer names: titankit -> Hugging Face (inside "layers.N." / "model.layers.N.").
_LAYER_NAMES = {
    "attention.wq.weight": "self_attn.q_proj.weight",
    "attention.wk.weight": "self_attn.k_proj.weight",
    "attention.wv.weight": "self_attn.v_proj.weight",
    "attention.wo.weight": "self_attn.o_proj.weight",
    "feed_forward.w1.weight": "mlp.gate_proj.weight",
    "feed_forward.w2.weight": "mlp.down_proj.weight",
    "feed_forward.w3.weight": "mlp.up_proj.weight",
    "attention_norm.weight": "input_layernorm.weight",
    "ffn_norm.weight": "post_attention_layernorm.weight",
}
_LAYER_NAMES_BACK = {v: k for k, v in _LAYER_NAMES.items()}
_TOP_NAMES = {
    "tok_embeddings.weight": "model.embed_tokens.weight",
    "norm.weight": "model.norm.weight",
    "output.weight": "lm_head.weight",
}
_TOP_NAMES_BACK = {v: k for k, v in _TOP_NAMES.items()}


def to_hf_name(name: str) -> str:
    """titankit parameter name -> Hugging Face's; KeyError for a name that has none."""
    if name in _TOP_NAMES:
        return _TOP_NAMES[name]
    m = _LAYER.fullmatch(name)
    if m is None or m.group(2) not in _LAYER_NAMES:
        raise KeyError(f"{name!r} is not a Llama-3 parameter titankit knows how to name for Hugging Face")
    return f"model.layers.{m.group(1)}.{_LAYER_NAMES[m.group(2)]}"


def from_hf_name(name: str) -> str:
    """Hugging Face parameter name -> titankit's; KeyError for a name that has none."""
    if name in _TOP_NAMES_BACK:
        return _TOP_NAMES_BACK[name]
    m = _HF_LAYER.fullmatch(name)
    if m is None or m.group(2) not in _LAYER_NAMES_BACK:
        raise KeyError(f"{name!r} is not a LlamaForCausalLM parameter titankit knows")
    return f"layers.{m.group(1)}.{_LAYER_NAMES_BACK[m.group(2)]}"


def _heads_of(name: str, args: LlamaArgs) -> int | None:
    """Heads in the rows of a RoPE-rotated projection (wq: n_heads, wk: kv heads), else None."""
    if name.endswith("attention.wq.weight"):
        return args.n_heads
    if name.endswith("attention.wk.weight"):
        return args.kv_heads
    return None


def to_hf_tensor(name: str, w: torch.Tensor, args: LlamaArgs) -> torch.Tensor:
    """titankit tensor -> Hugging Face's (wq/wk rows: per head, pairs (2i, 2i+1) -> (i, i + D/2))."""
    heads = _heads_of(name, args)
    if heads is None:
        return w
    d = args.head_dim
    return w.reshape(heads, d // 2, 2, -1).transpose(1, 2).reshape(heads * d, -1).contiguous()


def from_hf_tensor(name: str, w: torch.Tensor, args: LlamaArgs) -> torch.Tensor:
    """Hugging Face tensor (under titankit's `name`) -> titankit's; the inverse of to_hf_tensor."""
    heads = _heads_of(name, args)
    if heads is None:
        return w
    d = args.head_dim
    return w.reshape(heads, 2, d // 2, -1).transpose(1, 2).reshape(heads * d, -1).contiguous()


def hf_config(args: LlamaArgs, dtype: torch.dtype) -> dict[str, Any]:
    """config.json of a LlamaForCausalLM with these shapes (untied output, no biases)."""
    cfg: dict[str, Any] = {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "hidden_size": args.dim,
        "intermediate_size": args.hidden_dim,
        "num_hidden_layers": args.n_layers,
        "num_attention_heads": args.n_heads,
        "num_key_value_heads": args.kv_heads,
        "head_dim": args.head_dim,
        "vocab_size": args.vocab_size,
        "hidden_act": "silu",
        "rms_norm_eps": args.norm_eps,
        "max_position_embeddings": args.max_seq_len,
        "rope_theta": args.rope_theta,
        "rope_scaling": None,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "torch_dtype": str(dtype).removeprefix("torch."),
    }
    if args.rope_scaling:
        cfg["rope_scaling"] = _llama3_rope_scaling(args)
    return cfg


def _llama3_rope_scaling(args: LlamaArgs) -> dict[str, Any]:
    """config.json's rope_scaling for the Llama-3.1 frequencies of `args` (trainer/models/rope.py).

    transformers warns on every load unless original_max_position_embeddings < max_position_embeddings
    (its llama3 validation): true of the published models (8192 < 131072), not of one whose table
    is no longer than the original context (the debug flavor: 8192 and 8192). max_position_embeddings
    stays the model's real length (generate caps max_length at it). The frequencies depend on the
    original length only through original / low_freq_factor and original / high_freq_factor (the
    wavelength bounds; the smooth factor (original / wavelen - low) / (high - low) scales in both
    terms), so halving all three gives the same frequencies bit for bit (powers of two) and a
    config transformers accepts. An odd original cannot be halved exactly and is written as is."""
    original = args.rope_original_max_seq_len
    low, high = args.rope_low_freq_factor, args.rope_high_freq_factor
    while original >= args.max_seq_len and original % 2 == 0:
        original, low, high = original // 2, low / 2, high / 2
    return {
        "rope_type": "llama3",
        "factor": args.rope_scale_factor,
        "low_freq_factor": low,
        "high_freq_factor": high,
        "original_max_position_embeddings": original,
    }


def config_mismatches(hf: dict[str, Any], args: LlamaArgs) -> list[str]:
    """Each way a Hugging Face config.json disagrees with titankit's model args (empty: they agree).

    Shapes are checked again tensor by tensor; these also cover what no shape shows (the head count,
    norm epsilon and RoPE), which would otherwise train on silently with other numerics."""
    want = hf_config(args, torch.float32)
    out = []
    if hf.get("model_type", "llama") != "llama":
        out.append(f"model_type = {hf.get('model_type')!r}, not 'llama'")
    for key, ours in (("hidden_size", "dim"), ("intermediate_size", "hidden_dim"),
                      ("num_hidden_layers", "n_layers"), ("num_attention_heads", "n_heads"),
                      ("num_key_value_heads", "kv_heads"), ("vocab_size", "vocab_size"),
                      ("rms_norm_eps", "norm_eps"), ("rope_theta", "rope_theta")):
        theirs = hf.get(key, hf.get("num_attention_heads") if key == "num_key_value_heads" else None)
        if key == "rope_theta" and theirs is None:
            theirs = (hf.get("rope_parameters") or {}).get("rope_theta")
        if theirs != want[key]:
            out.append(f"{key} = {theirs!r}, but the titankit model has {ours} = {want[key]!r}")
    scaling = hf.get("rope_scaling") or hf.get("rope_parameters") or {}
    kind = scaling.get("rope_type", scaling.get("type", "default"))
    if args.rope_scaling:
        if kind != "llama3":
            out.append(f"rope_scaling type {kind!r}, but the titankit model uses Llama-3.1 scaling "
                       "(model.overrides.rope_scaling = false turns it off)")
        else:
            out.extend(_llama3_mismatches(scaling, want["rope_scaling"]))
    elif kind not in ("default", None):
        out.append(f"rope_scaling type {kind!r}, but the titankit model has rope_scaling = false")
    return out


_RATIO_KEYS = ("original_max_position_embeddings", "low_freq_factor", "high_freq_factor")


def _llama3_mismatches(theirs: dict[str, Any], want: dict[str, Any]) -> list[str]:
    """How a llama3 rope_scaling disagrees with ours. The original length and the two factors are
    compared through the ratios that set the frequencies (see _llama3_rope_scaling), so an export
    that wrote them halved (or one written before it did) describes the same model."""
    out = [f"rope_scaling.{key} = {theirs.get(key)!r}, but the titankit model has {value!r}"
           for key, value in want.items()
           if (key != "rope_type" and not isinstance(theirs.get(key), (int, float)))
           or (key == "factor" and theirs.get(key) != value)]
    if out:
        return out

    def bounds(s: dict[str, Any]) -> tuple[float, float]:
        original, low, high = (s[k] for k in _RATIO_KEYS)
        return original / low, original / high

    if not all(math.isclose(a, b, rel_tol=1e-12) for a, b in zip(bounds(theirs), bounds(want))):
        shown = ", ".join(f"{k} = {theirs[k]!r}" for k in _RATIO_KEYS)
        ours = ", ".join(f"{k} = {want[k]!r}" for k in _RATIO_KEYS)
        out.append(f"rope_scaling {shown}, but the titankit model has {ours} (the frequencies follow "
                   "original / low_freq_factor and original / high_freq_factor)")
    return out
