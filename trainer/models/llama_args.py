"""LlamaArgs: the shape of a Llama-3 dense model, its parameter count and FLOPs per token.

Counts are computed analytically from the shapes, so the trainer (and MFU) can use them without
building the model; `num_params(model)` in llama.py counts a built one.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass

import torch.nn as nn

import kernels.attention
import kernels.norm


def ffn_hidden_dim(dim: int, multiple_of: int, ffn_dim_multiplier: float | None) -> int:
    """Llama's SwiGLU width: 2/3 of 4*dim (same FLOPs as a 4*dim GELU MLP), times the multiplier,
    rounded up to a multiple of `multiple_of` (Meta's llama/model.py; 8B: 4096 -> 14336)."""
    hidden = int(2 * (4 * dim) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * math.ceil(hidden / multiple_of)


@dataclass
class LlamaArgs:
    dim: int = 4096
    """Model (residual stream) width."""
    n_layers: int = 32
    """Transformer blocks."""
    n_heads: int = 32
    """Query heads; head_dim = dim / n_heads."""
    n_kv_heads: int | None = None
    """Key/value heads (grouped-query attention); None = n_heads."""
    vocab_size: int = 128256
    """Embedding rows and output columns (untied)."""
    multiple_of: int = 256
    """The FFN width is rounded up to a multiple of this."""
    ffn_dim_multiplier: float | None = None
    """Scales the FFN width before rounding (8B/70B: 1.3, 405B: 1.2); None = 1."""
    norm_eps: float = 1e-5
    """RMSNorm epsilon."""
    rope_theta: float = 500000.0
    """RoPE base frequency."""
    rope_scaling: bool = True
    """Llama-3.1 RoPE frequency scaling (long-context extension of the low frequencies)."""
    rope_scale_factor: float = 8.0
    """Llama-3.1 scaling: low frequencies are divided by this."""
    rope_low_freq_factor: float = 1.0
    """Llama-3.1 scaling: wavelengths above original_max_seq_len / this are fully scaled."""
    rope_high_freq_factor: float = 4.0
    """Llama-3.1 scaling: wavelengths below original_max_seq_len / this are kept."""
    rope_original_max_seq_len: int = 8192
    """Llama-3.1 scaling: the context length the frequencies were first trained for."""
    max_seq_len: int = 8192
    """Rows of the RoPE table: the largest position the model can take."""
    attention: str = "sdpa"
    """Attention backend of kernels.attention (reference, sdpa, triton, ...)."""
    norm_backend: str = "torch"
    """RMSNorm backend of kernels.norm (torch or triton)."""

    def __post_init__(self) -> None:
        where = f"[model] flavor/overrides ({type(self).__name__})"
        # NaN passes every range check below (it compares false) and inf the one-sided ones; the run
        # would start on every rank and stop at its first step with a non-finite loss.
        for f in dataclasses.fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and not math.isfinite(value):
                raise ValueError(f"{where}: {f.name} must be a finite number, got {value}")
        for name in ("dim", "n_layers", "n_heads", "vocab_size", "multiple_of", "max_seq_len"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
        kv = self.kv_heads
        if not isinstance(kv, int) or kv < 1 or self.n_heads % kv != 0:
            raise ValueError(
                f"{where}: n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})"
            )
        if self.dim % self.n_heads != 0 or (self.dim // self.n_heads) % 2 != 0:
            raise ValueError(
                f"{where}: dim ({self.dim}) / n_heads ({self.n_heads}) must be an even integer "
                "(the head dim, rotated in pairs by RoPE)"
            )
        if self.ffn_dim_multiplier is not None and self.ffn_dim_multiplier <= 0:
            raise ValueError(f"{where}: ffn_dim_multiplier must be > 0 or None, got {self.ffn_dim_multiplier}")
        if self.norm_eps <= 0 or self.rope_theta <= 1:
            raise ValueError(f"{where}: norm_eps must be > 0 and rope_theta > 1")
        if self.rope_scaling and not (
            self.rope_scale_factor >= 1
            and 0 < self.rope_low_freq_factor < self.rope_high_freq_factor
            and self.rope_original_max_seq_len >= 1
        ):
            raise ValueError(
                f"{where}: rope scaling needs rope_scale_factor >= 1 and "
                "0 < rope_low_freq_factor < rope_high_freq_factor"
            )
        if self.attention not in kernels.attention.BACKENDS:
            raise ValueError(
                f"{where}: attention {self.attention!r} is not a backend; valid: "
                f"{', '.join(kernels.attention.BACKENDS)}"
            )
        if self.norm_backend not in kernels.norm.BACKENDS:
            raise ValueError(
                f"{where}: norm_backend {self.norm_backend!r} is not a backend; valid: "
                f"{', '.join(kernels.norm.BACKENDS)}"
            )

    @property
    def kv_heads(self) -> int:
        return self.n_heads if self.n_kv_heads is None else self.n_kv_heads

    @property
    def head_dim(self) -> int:
        return self.dim // self.n_heads

    @property
    def hidden_dim(self) -> int:
        return ffn_hidden_dim(self.dim, self.multiple_of, self.ffn_dim_multiplier)

    def num_params(self, model: nn.Module | None = None, exclude_embedding: bool = False) -> int:
        """Parameters of `model`, or (model None) of the model these args build, counted from shapes."""
        if model is not None:
            from trainer.models.llama import num_params

            return num_params(model, exclude_embedding=exclude_embedding)
        d, hd = self.dim, self.head_dim
        attn = d * (self.n_heads * hd) + 2 * d * (self.kv_heads * hd) + (self.n_heads * hd) * d
        ffn = 3 * d * self.hidden_dim
        per_layer = attn + ffn + 2 * d  # + attention_norm and ffn_norm weights
        embedding = self.vocab_size * d
        total = embedding + self.n_layers * per_layer + d + d * self.vocab_size  # + norm + output
        return total - embedding if exclude_embedding else total

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token, torchtitan's convention (DESIGN.md section 4): 6 x non-embedding
        params (forward 2 + backward 4 per weight) + 12 x layers x dim x seq_len (QK^T and PV, both
        directions, full attention matrix without causal halving)."""
        return 6 * self.num_params(exclude_embedding=True) + 12 * self.n_layers * self.dim * seq_len
