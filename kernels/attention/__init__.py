"""Attention for titankit: one contract (docs/interfaces.md, "Attention"), several backends.

    attention(q, k, v, *, causal=True, doc_ids=None, backend="sdpa") -> out        (differentiable)
    attention_fwd(q, k, v, *, causal, q_doc=None, kv_doc=None, backend) -> (out, lse)
    attention_bwd(dout, q, k, v, out, lse, *, causal, q_doc=None, kv_doc=None, backend)
        -> (dq, dk, dv)

q (B, Sq, Hq, D); k, v (B, Skv, Hkv, D) with Hq % Hkv == 0; lse (B, Hq, Sq) float32 natural log.
Causal masks are bottom-right aligned (query i sees key j iff j <= i + Skv - Sq). Scale 1/sqrt(D).
Backends: "reference" (eager fp32, the spec), "sdpa" (PyTorch SDPA), "triton" (our kernels).
"""

from __future__ import annotations

import torch

from kernels.attention import reference, sdpa
from kernels.attention.reference import merge_partials

BACKENDS = ("reference", "sdpa", "triton", "thunderkittens")

__all__ = ["BACKENDS", "attention", "attention_bwd", "attention_fwd", "merge_partials"]


def _check(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    q_doc: torch.Tensor | None,
    kv_doc: torch.Tensor | None,
    backend: str,
) -> None:
    """Shape/dtype validation shared by every entry point (cheap: metadata only, compile-safe)."""
    where = "kernels.attention"
    if backend not in BACKENDS:
        raise ValueError(f"{where}: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
    if q.dim() != 4 or k.dim() != 4 or v.dim() != 4:
        raise ValueError(
            f"{where}: q, k, v must be 4-D (B, S, H, D); got {tuple(q.shape)}, "
            f"{tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape != v.shape:
        raise ValueError(f"{where}: k {tuple(k.shape)} and v {tuple(v.shape)} must match")
    b, _, hq, d = q.shape
    if k.shape[0] != b or k.shape[3] != d:
        raise ValueError(
            f"{where}: batch and head dim of q {tuple(q.shape)} and k {tuple(k.shape)} must match"
        )
    if k.shape[2] == 0 or hq % k.shape[2] != 0:
        raise ValueError(
            f"{where}: query heads ({hq}) must be a multiple of key/value heads ({k.shape[2]})"
        )
    if q.dtype != k.dtype or q.dtype != v.dtype:
        raise ValueError(f"{where}: q, k, v dtypes differ ({q.dtype}, {k.dtype}, {v.dtype})")
    if (q_doc is None) != (kv_doc is None):
        raise ValueError(f"{where}: pass both q_doc and kv_doc, or neither")
    if q_doc is not None and kv_doc is not None:
        if tuple(q_doc.shape) != (b, q.shape[1]) or tuple(kv_doc.shape) != (b, k.shape[1]):
            raise ValueError(
                f"{where}: document ids must be (B, Sq) = {(b, q.shape[1])} and (B, Skv) = "
                f"{(b, k.shape[1])}; got {tuple(q_doc.shape)} and {tuple(kv_doc.shape)}"
            )
        if q_doc.dtype.is_floating_point or kv_doc.dtype.is_floating_point:
            raise ValueError(f"{where}: document ids must be integers, got {q_doc.dtype}")


class _ReferenceAttention(torch.autograd.Function):
    """Autograd through the reference fwd/bwd pair, so the backward formula itself is exercised."""

    @staticmethod
    def forward(ctx, q, k, v, causal, q_doc, kv_doc):  # type: ignore[override]
        out, lse = reference.attention_fwd(q, k, v, causal=causal, q_doc=q_doc, kv_doc=kv_doc)
        ctx.save_for_backward(q, k, v, out, lse, q_doc, kv_doc)
        ctx.causal = causal
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse, q_doc, kv_doc = ctx.saved_tensors
        dq, dk, dv = reference.attention_bwd(
            dout, q, k, v, out, lse, causal=ctx.causal, q_doc=q_doc, kv_doc=kv_doc
        )
        return dq, dk, dv, None, None, None


def _impl(backend: str):
    """The module implementing a fast backend (imported on first use: Triton and the ThunderKittens
    build are only needed by runs that ask for them). Each has attention/attention_fwd/attention_bwd."""
    if backend == "sdpa":
        return sdpa
    if backend == "triton":
        from kernels.attention import triton_op

        return triton_op
    from kernels.thunderkittens import ops as tk_ops

    return tk_ops


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool = True,
    doc_ids: torch.Tensor | None = None,
    backend: str = "sdpa",
) -> torch.Tensor:
    """Differentiable attention: out (B, Sq, Hq, D). doc_ids (B, S) needs Sq == Skv."""
    if doc_ids is not None and q.shape[1] != k.shape[1]:
        raise ValueError(
            "kernels.attention.attention: doc_ids (B, S) needs Sq == Skv; for blocks of different "
            "lengths call attention_fwd/attention_bwd with q_doc and kv_doc"
        )
    _check(q, k, v, doc_ids, doc_ids, backend)
    if backend == "reference":
        return _ReferenceAttention.apply(q, k, v, causal, doc_ids, doc_ids)
    return _impl(backend).attention(q, k, v, causal=causal, doc_ids=doc_ids)


def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    kv_doc: torch.Tensor | None = None,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Forward returning (out (B, Sq, Hq, D), lse (B, Hq, Sq) float32); no autograd graph."""
    _check(q, k, v, q_doc, kv_doc, backend)
    if backend == "reference":
        return reference.attention_fwd(q, k, v, causal=causal, q_doc=q_doc, kv_doc=kv_doc)
    return _impl(backend).attention_fwd(q, k, v, causal=causal, q_doc=q_doc, kv_doc=kv_doc)


def attention_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    kv_doc: torch.Tensor | None = None,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention backward; out/lse may be the global ones of a larger attention (ring CP)."""
    _check(q, k, v, q_doc, kv_doc, backend)
    if dout.shape != q.shape or out.shape != q.shape:
        raise ValueError(
            f"kernels.attention.attention_bwd: dout {tuple(dout.shape)} and out "
            f"{tuple(out.shape)} must have q's shape {tuple(q.shape)}"
        )
    if tuple(lse.shape) != (q.shape[0], q.shape[2], q.shape[1]):
        raise ValueError(
            f"kernels.attention.attention_bwd: lse must be (B, Hq, Sq) = "
            f"{(q.shape[0], q.shape[2], q.shape[1])}, got {tuple(lse.shape)}"
        )
    if backend == "reference":
        return reference.attention_bwd(
            dout, q, k, v, out, lse, causal=causal, q_doc=q_doc, kv_doc=kv_doc
        )
    return _impl(backend).attention_bwd(
        dout, q, k, v, out, lse, causal=causal, q_doc=q_doc, kv_doc=kv_doc
    )
