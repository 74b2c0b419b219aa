"""The "triton" attention backend as torch custom ops, so torch.compile, FSDP2 and DTensor see
opaque ops with known output shapes:

    titankit::flash_attn_fwd(q, k, v, causal, q_doc, kv_doc) -> (out, lse)
    titankit::flash_attn_bwd(dout, q, k, v, out, lse, causal, q_doc, kv_doc, dlse) -> (dq, dk, dv)

flash_attn_fwd has an autograd formula (the backward op), so `attention(..., backend="triton")` is
differentiable, also through lse (dlse enters the backward as delta -= dlse).
The launches and their settings (TMA, dQ mode, loop order, pinned tiles) live in triton_launch.
"""

from __future__ import annotations

import torch

from kernels import BackendUnavailable
from kernels.attention import triton_launch

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)


def interpreted() -> bool:
    """Whether the kernels run in Triton's CPU interpreter (see triton_launch.interpreted)."""
    return triton_launch.interpreted()


def _validate(q: torch.Tensor) -> None:
    where = "kernels.attention backend 'triton'"
    if q.shape[-1] not in HEAD_DIMS:
        raise BackendUnavailable(f"{where}: head dim {q.shape[-1]} is not supported; valid: {HEAD_DIMS}")
    if q.dtype not in DTYPES:
        raise BackendUnavailable(f"{where}: dtype {q.dtype} is not supported; valid: bf16, fp16, fp32")
    if not q.is_cuda and not interpreted():
        raise BackendUnavailable(
            f"{where} needs CUDA tensors (got device {q.device}); on CPU use backend 'sdpa' or "
            "'reference', or set TRITON_INTERPRET=1 before importing triton (slow, for tests)"
        )


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


@torch.library.custom_op("titankit::flash_attn_fwd", mutates_args=())
def flash_attn_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    causal: bool,
    q_doc: torch.Tensor | None,
    kv_doc: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    _validate(q)
    q, k, v = (_last_dim_contiguous(t) for t in (q, k, v))
    b, sq, hq, _ = q.shape
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if sq == 0 or b * hq == 0:
        return out, lse
    triton_launch.fwd(q, k, v, causal, q_doc, kv_doc, out, lse)
    return out, lse


@flash_attn_fwd.register_fake
def _(q, k, v, causal, q_doc, kv_doc):
    b, sq, hq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, hq, sq), dtype=torch.float32)


@torch.library.custom_op("titankit::flash_attn_bwd", mutates_args=())
def flash_attn_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    q_doc: torch.Tensor | None,
    kv_doc: torch.Tensor | None,
    dlse: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    _validate(q)
    dout, q, k, v, out = (_last_dim_contiguous(t) for t in (dout, q, k, v, out))
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if q.shape[1] == 0 or k.shape[1] == 0 or q.shape[0] * q.shape[2] == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    triton_launch.bwd(dout, q, k, v, out, lse, causal, q_doc, kv_doc, dlse, dq, dk, dv)
    return dq, dk, dv


@flash_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, q_doc, kv_doc, dlse):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, causal, q_doc, kv_doc = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, q_doc, kv_doc)
    ctx.causal = causal


def _backward(ctx, dout, dlse):
    q, k, v, out, lse, q_doc, kv_doc = ctx.saved_tensors
    dq, dk, dv = flash_attn_bwd(dout, q, k, v, out, lse, ctx.causal, q_doc, kv_doc, dlse)
    return dq, dk, dv, None, None, None


flash_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


def attention(q, k, v, *, causal: bool, doc_ids: torch.Tensor | None) -> torch.Tensor:
    """Differentiable Triton attention (validated by kernels.attention.attention)."""
    return flash_attn_fwd(q, k, v, causal, doc_ids, doc_ids)[0]


def attention_fwd(q, k, v, *, causal: bool, q_doc=None, kv_doc=None):
    return flash_attn_fwd(q, k, v, causal, q_doc, kv_doc)


def attention_bwd(dout, q, k, v, out, lse, *, causal: bool, q_doc=None, kv_doc=None):
    return flash_attn_bwd(dout, q, k, v, out, lse, causal, q_doc, kv_doc, None)
