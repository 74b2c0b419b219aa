"""Llama-3 dense transformer, single-device PyTorch (parallelism is applied from outside).

Structure (module names are a contract, docs/interfaces.md "Models"):
    tok_embeddings -> layers["0".."N-1"] -> norm -> output (untied)
    block: x + attention(attention_norm(x)); then h + feed_forward(ffn_norm(h))
    attention: wq, wk, wv -> RoPE on q, k -> core (kernels.attention, GQA unexpanded) -> wo
    feed_forward: w2(silu(w1(x)) * w3(x))  (SwiGLU, Shazeer 2020, arXiv:2002.05202)
"""

from __future__ import annotations

import math
import re
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels.attention
import kernels.norm
from trainer.models.llama_args import LlamaArgs
from trainer.models.rope import apply_rope, rope_table

InitFn = Callable[[str, torch.Tensor, float], None]

# Segments that wrappers (activation checkpointing, torch.compile, FSDP1) insert into parameter
# names. Dropping them gives every parameter one name under every layout, which seeds init by fqn.
_WRAPPER_SEGMENTS = re.compile(r"(_checkpoint_wrapped_module|_orig_mod|_fsdp_wrapped_module)\.")


def canonical_fqn(fqn: str) -> str:
    """`layers.0._checkpoint_wrapped_module.attention.wq.weight` -> `layers.0.attention.wq.weight`."""
    return _WRAPPER_SEGMENTS.sub("", fqn)


def default_init_fn(fqn: str, tensor: torch.Tensor, std: float) -> None:
    """Normal(0, std) truncated at +-3 std, from torch's global generator."""
    nn.init.trunc_normal_(tensor, mean=0.0, std=std, a=-3 * std, b=3 * std)


class RMSNorm(nn.Module):
    """RMSNorm over the last dim through kernels.norm (fp32 math, output in the input dtype)."""

    def __init__(self, dim: int, eps: float, backend: str = "torch") -> None:
        super().__init__()
        self.eps = eps
        self.backend = backend
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return kernels.norm.rms_norm(x, self.weight, self.eps, backend=self.backend)


class AttentionCore(nn.Module):
    """Parameter-free attention kernel call; context parallelism swaps this module from outside."""

    def __init__(self, backend: str) -> None:
        super().__init__()
        self.backend = backend

    def forward(
        self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, doc_ids: torch.Tensor | None
    ) -> torch.Tensor:
        """q (B, S, Hq, D), k/v (B, S, Hkv, D), doc_ids (B, S) or None -> (B, S, Hq, D)."""
        return kernels.attention.attention(q, k, v, causal=True, doc_ids=doc_ids, backend=self.backend)


class Attention(nn.Module):
    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * args.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.kv_heads * args.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.kv_heads * args.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * args.head_dim, args.dim, bias=False)
        self.core = AttentionCore(args.attention)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, doc_ids: torch.Tensor | None) -> torch.Tensor:
        """x (B, S, dim), rope (B or 1, S, head_dim) -> (B, S, dim)."""
        b, s, _ = x.shape
        # -1 heads: under tensor parallelism each rank holds a slice of the heads.
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        out = self.core(q, k, v, doc_ids)  # (B, S, Hq, D)
        return self.wo(out.reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self, dim: int, hidden_dim: int) -> None:
        super().__init__()
        self.w1 = nn.Linear(dim, hidden_dim, bias=False)
        self.w2 = nn.Linear(hidden_dim, dim, bias=False)
        self.w3 = nn.Linear(dim, hidden_dim, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, layer_id: int, args: LlamaArgs) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.feed_forward = FeedForward(args.dim, args.hidden_dim)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, doc_ids: torch.Tensor | None) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope, doc_ids)
        return h + self.feed_forward(self.ffn_norm(h))


_LAYER_PARAM = re.compile(r"layers\.(\d+)\.(attention|feed_forward)\.(wq|wk|wv|wo|w1|w2|w3)\.weight")


class Llama(nn.Module):
    """Llama-3 dense decoder. Build on meta, parallelize, `to_empty`, then `init_weights()`."""

    def __init__(self, args: LlamaArgs) -> None:
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        # Non-persistent: derived from args, recomputed by init_weights, never checkpointed.
        self.register_buffer("rope_cache", rope_table(args), persistent=False)
        self.layers = nn.ModuleDict({str(i): TransformerBlock(i, args) for i in range(args.n_layers)})
        self.norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(
        self,
        tokens: torch.Tensor,
        positions: torch.Tensor | None = None,
        doc_ids: torch.Tensor | None = None,
    ) -> torch.Tensor:
        """tokens (B, S) int64; positions (B, S) or (S,) integers in [0, max_seq_len), or None
        (= 0..S-1); doc_ids (B, S) int32 or None (a token attends only within its document)
        -> logits (B, S, vocab) in the compute dtype. The causal mask follows the order of the
        sequence, not `positions` (context parallelism passes its chunks' positions)."""
        if tokens.dim() != 2:
            raise ValueError(f"Llama.forward: tokens must be (batch, seq), got shape {tuple(tokens.shape)}")
        b, s = tokens.shape
        if positions is None:
            if s > self.args.max_seq_len:
                raise ValueError(
                    f"Llama.forward: sequence of {s} tokens exceeds max_seq_len {self.args.max_seq_len}; "
                    "raise it with [model] overrides.max_seq_len"
                )
            rope = self.rope_cache[:s].unsqueeze(0)  # (1, S, head_dim)
        else:
            if positions.shape not in ((b, s), (s,)):
                raise ValueError(
                    f"Llama.forward: positions must be (B, S) = {(b, s)} or (S,), got {tuple(positions.shape)}"
                )
            rope = self.rope_cache[positions]
            rope = rope.unsqueeze(0) if positions.dim() == 1 else rope  # (B or 1, S, head_dim)
        h = self.tok_embeddings(tokens)
        for layer in self.layers.values():
            h = layer(h, rope, doc_ids)
        return self.output(self.norm(h))

    def param_init_std(self, fqn: str) -> float | None:
        """Init std of a parameter by its canonical fqn; None = fill with ones (norm weights).

        torchtitan's scheme: embeddings 1.0; q/k/v and w1 0.02; wo, w2, w3 0.02 / sqrt(2 (layer+1))
        (deeper residual writes start smaller); output dim^-0.5 (unit-scale logits)."""
        if fqn == "tok_embeddings.weight":
            return 1.0
        if fqn == "output.weight":
            return self.args.dim**-0.5
        if fqn == "norm.weight" or fqn.endswith(("attention_norm.weight", "ffn_norm.weight")):
            return None
        match = _LAYER_PARAM.fullmatch(fqn)
        if match is None:
            raise AssertionError(f"Llama.init_weights: no init rule for parameter {fqn!r}")
        layer_id, name = int(match.group(1)), match.group(3)
        if name in ("wo", "w2", "w3"):
            return 0.02 / math.sqrt(2 * (layer_id + 1))
        return 0.02

    @torch.no_grad()
    def init_weights(self, init_fn: InitFn | None = None, buffer_device: torch.device | str | None = None) -> None:
        """Initialise every parameter and recompute the RoPE buffer (all init lives here).

        init_fn(fqn, tensor, std) fills `tensor` with normal(0, std) truncated at +-3 std; fqn is the
        canonical name (wrapper segments removed), so a caller seeding by fqn gets the same weights
        under every parallel layout. Default: torch.nn.init.trunc_normal_ on the global RNG.
        buffer_device: where the RoPE table is built (default: where the buffer lives now)."""
        init_fn = default_init_fn if init_fn is None else init_fn
        for raw_fqn, param in self.named_parameters():
            fqn = canonical_fqn(raw_fqn)
            std = self.param_init_std(fqn)
            if std is None:
                nn.init.ones_(param)
            else:
                init_fn(fqn, param, std)
        device = self.rope_cache.device if buffer_device is None else buffer_device
        self.rope_cache = rope_table(self.args, device=device)


def num_params(model: nn.Module, exclude_embedding: bool = False) -> int:
    """Parameters of a built model (global sizes under FSDP/TP); optionally without tok_embeddings."""
    total = 0
    for fqn, param in model.named_parameters():
        if exclude_embedding and canonical_fqn(fqn).endswith("tok_embeddings.weight"):
            continue
        total += param.numel()
    return total
