"""MoEArgs: a Llama-3 shape whose feed-forward becomes a mixture of experts in chosen layers.

Layers 0 .. n_dense_layers-1 keep a dense SwiGLU FFN (DeepSeek-V3's first_k_dense: routing is
unstable and poorly balanced right after the embeddings); every later layer has a token-choice top-k
MoE FFN of n_experts routed experts (width moe_hidden_dim) plus n_shared_experts always-on experts.
Counts are analytic, so the trainer (and MFU) can use them without building the model; FLOPs/token
count only the ACTIVE parameters (top_k routed + shared experts + router per MoE layer).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch.nn as nn

import kernels.moe
from trainer.models.llama_args import LlamaArgs

SCORE_FUNCS = ("softmax", "sigmoid")


@dataclass
class MoEArgs(LlamaArgs):
    n_experts: int = 8
    """Routed experts per MoE layer."""
    top_k: int = 2
    """Routed experts each token is sent to."""
    moe_hidden_dim: int = 256
    """SwiGLU width of one expert (routed and shared)."""
    n_shared_experts: int = 0
    """Always-on experts per MoE layer (DeepSeekMoE); computed as one SwiGLU of n x moe_hidden_dim."""
    n_dense_layers: int = 1
    """The first this many layers keep a dense FFN (DeepSeek-V3's first_k_dense)."""
    dense_hidden_dim: int | None = None
    """Width of the dense layers' FFN; None = Llama's rule (multiple_of, ffn_dim_multiplier)."""
    score_func: str = "softmax"
    """Router scores: softmax over experts (Switch, DeepSeekMoE) or per-expert sigmoid (DeepSeek-V3)."""
    route_norm: bool = False
    """Renormalise each token's top-k weights to sum to 1 (Mixtral, DeepSeek-V3 with sigmoid)."""
    route_scale: float = 1.0
    """Multiplies the routed experts' weights (DeepSeek-V3 uses 2.5 with 256 experts)."""
    aux_loss_coef: float = 0.0
    """Weight of the Switch load-balancing loss E * sum_e f_e P_e per MoE layer (summed over layers,
    averaged over micro-batches, f and P over the global micro-batch); 0 disables it."""
    bias_update_rate: float = 0.0
    """DeepSeek-V3 auxiliary-loss-free balancing: after each optimizer step every expert's selection
    bias moves by this rate x sign(mean load - its load) (global counts of the step); 0 disables it."""
    moe_backend: str = "torch"
    """Grouped expert GEMM of kernels.moe: torch (torch._grouped_mm), triton, or loop (the reference)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        where = "[model] flavor/overrides (MoEArgs)"
        for name in ("n_experts", "top_k", "moe_hidden_dim"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ValueError(f"{where}: {name} must be a positive integer, got {value!r}")
        if self.top_k > self.n_experts:
            raise ValueError(f"{where}: top_k ({self.top_k}) must be <= n_experts ({self.n_experts})")
        if self.n_shared_experts < 0:
            raise ValueError(f"{where}: n_shared_experts must be >= 0, got {self.n_shared_experts}")
        if not 0 <= self.n_dense_layers <= self.n_layers:
            raise ValueError(
                f"{where}: n_dense_layers must be in [0, n_layers = {self.n_layers}], "
                f"got {self.n_dense_layers}"
            )
        if self.dense_hidden_dim is not None and self.dense_hidden_dim < 1:
            raise ValueError(f"{where}: dense_hidden_dim must be a positive integer or None")
        if self.score_func not in SCORE_FUNCS:
            raise ValueError(f"{where}: score_func {self.score_func!r}; valid: {', '.join(SCORE_FUNCS)}")
        if self.route_scale <= 0:
            raise ValueError(f"{where}: route_scale must be > 0, got {self.route_scale}")
        if self.aux_loss_coef < 0 or self.bias_update_rate < 0:
            raise ValueError(f"{where}: aux_loss_coef and bias_update_rate must be >= 0 (0 disables)")
        if self.moe_backend not in kernels.moe.BACKENDS:
            raise ValueError(
                f"{where}: moe_backend {self.moe_backend!r}; valid: {', '.join(kernels.moe.BACKENDS)}"
            )
        if self.moe_backend == "torch" and (self.dim % 8 or self.moe_hidden_dim % 8):
            raise ValueError(
                f"{where}: moe_backend 'torch' (torch._grouped_mm) needs dim ({self.dim}) and "
                f"moe_hidden_dim ({self.moe_hidden_dim}) to be multiples of 8 (16-byte rows in "
                "bfloat16); use moe_backend 'triton' or 'loop' for other shapes"
            )

    @property
    def hidden_dim(self) -> int:
        """FFN width of the dense layers."""
        return self.dense_hidden_dim if self.dense_hidden_dim is not None else super().hidden_dim

    @property
    def n_moe_layers(self) -> int:
        return self.n_layers - self.n_dense_layers

    def is_moe_layer(self, layer_id: int) -> bool:
        return layer_id >= self.n_dense_layers

    def _counts(self) -> dict[str, int]:
        """Parameter counts by part, from the shapes (names as in trainer/models/moe.py)."""
        d, hd = self.dim, self.head_dim
        attn = d * (self.n_heads * hd) + 2 * d * (self.kv_heads * hd) + (self.n_heads * hd) * d
        expert = 3 * d * self.moe_hidden_dim
        return {
            "embedding": self.vocab_size * d,
            "output": d * self.vocab_size + d,  # + final norm
            "attention": attn + 2 * d,  # + attention_norm and ffn_norm
            "dense_ffn": 3 * d * self.hidden_dim,
            "router": self.n_experts * d,
            "expert": expert,
            "shared": self.n_shared_experts * expert,
        }

    def num_params(self, model: nn.Module | None = None, exclude_embedding: bool = False) -> int:
        """All parameters (every expert), of `model` or (model None) counted from the shapes."""
        if model is not None:
            from trainer.models.llama import num_params

            return num_params(model, exclude_embedding=exclude_embedding)
        c = self._counts()
        per_moe = c["attention"] + c["router"] + self.n_experts * c["expert"] + c["shared"]
        per_dense = c["attention"] + c["dense_ffn"]
        total = (c["embedding"] + c["output"] + self.n_dense_layers * per_dense
                 + self.n_moe_layers * per_moe)
        return total - c["embedding"] if exclude_embedding else total

    def num_active_params(self, exclude_embedding: bool = False) -> int:
        """Parameters one token passes through: top_k routed experts (+ shared, router) per MoE layer."""
        c = self._counts()
        per_moe = c["attention"] + c["router"] + self.top_k * c["expert"] + c["shared"]
        per_dense = c["attention"] + c["dense_ffn"]
        total = (c["embedding"] + c["output"] + self.n_dense_layers * per_dense
                 + self.n_moe_layers * per_moe)
        return total - c["embedding"] if exclude_embedding else total

    def flops_per_token(self, seq_len: int) -> int:
        """Training FLOPs per token on the ACTIVE parameters (DESIGN.md section 4): 6 x active
        non-embedding params + 12 x layers x dim x seq_len (attention scores and values)."""
        return 6 * self.num_active_params(exclude_embedding=True) + 12 * self.n_layers * self.dim * seq_len


# vocab 512 covers the built-in byte tokenizer. moe_debug turns every option on (shared expert,
# both balancing mechanisms, a dense first layer), so CPU tests exercise all of them.
# moe_16b: DeepSeekMoE-16B's shape (arXiv:2401.06066: dim 2048, 28 layers, 16 heads, 64 experts of
# width 1408, top-6, 2 shared, first layer dense with width 10944) on Llama-3's vocabulary and RoPE,
# with DeepSeek-V3's sigmoid router and balancing (bias rate 1e-3, aux coefficient 1e-4).
# Counted: 16.48B parameters, 2.93B active (2.67B active without the embedding).
MOE_FLAVORS: dict[str, MoEArgs] = {
    "moe_debug": MoEArgs(
        dim=128, n_layers=4, n_heads=8, n_kv_heads=4, vocab_size=512, multiple_of=64,
        rope_theta=500000.0, max_seq_len=8192,
        n_experts=8, top_k=2, moe_hidden_dim=64, n_shared_experts=1, n_dense_layers=1,
        score_func="softmax", route_norm=True, aux_loss_coef=0.01, bias_update_rate=1e-3,
    ),
    "moe_16b": MoEArgs(
        dim=2048, n_layers=28, n_heads=16, n_kv_heads=16, vocab_size=128256, multiple_of=256,
        max_seq_len=131072,
        n_experts=64, top_k=6, moe_hidden_dim=1408, n_shared_experts=2, n_dense_layers=1,
        dense_hidden_dim=10944, score_func="sigmoid", route_norm=True, route_scale=1.0,
        aux_loss_coef=1e-4, bias_update_rate=1e-3,
    ),
}
