"""The "sdpa" attention backend: PyTorch's scaled_dot_product_attention and its LSE-returning ops.

`attention` calls `F.scaled_dot_product_attention` (cuDNN / flash / efficient on CUDA, its fused
kernel on CPU) with native GQA. The fwd/bwd pair that context parallelism needs must return and
accept the log-sum-exp, which the public SDPA function hides, so it calls the aten ops underneath:
  CUDA: aten._scaled_dot_product_flash_attention(_backward) (FlashAttention-2, bf16/fp16, GQA)
  CPU:  aten._scaled_dot_product_flash_attention_for_cpu(_backward) (GQA native)
Cases those ops cannot express (document masks, causal with Sq != Skv, fp32 on CUDA) run the fp32
reference math for that call, after one warning naming the case.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from kernels.attention import reference

log = logging.getLogger(__name__)
_WARNED: set[str] = set()


def _warn_once(key: str, message: str) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.warning(message)


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    doc_ids: torch.Tensor | None,
) -> torch.Tensor:
    """Differentiable SDPA on (B, S, H, D) tensors; returns (B, Sq, Hq, D)."""
    sq, skv = q.shape[1], k.shape[1]
    mask = None
    is_causal = causal
    if doc_ids is not None or (causal and sq != skv):
        # SDPA's is_causal is top-left aligned when Sq != Skv, so build the bottom-right mask here.
        mask = reference.allowed_mask(
            sq, skv, causal=causal, q_doc=doc_ids, kv_doc=doc_ids, device=q.device
        )
        is_causal = False
    out = F.scaled_dot_product_attention(
        q.transpose(1, 2),
        k.transpose(1, 2),
        v.transpose(1, 2),
        attn_mask=mask,
        is_causal=is_causal,
        enable_gqa=q.shape[2] != k.shape[2],
    )  # (B, Hq, Sq, D)
    return out.transpose(1, 2)


def _fused_case(q: torch.Tensor, k: torch.Tensor, causal: bool, has_doc: bool) -> str | None:
    """None when the aten LSE ops can run this call; otherwise the reason they cannot."""
    if has_doc:
        return "document masks"
    if causal and q.shape[1] != k.shape[1]:
        return "causal attention with Sq != Skv (bottom-right aligned)"
    if q.is_cuda and q.dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {q.dtype} on CUDA (the flash op takes bf16/fp16)"
    if not q.is_cuda and q.device.type != "cpu":
        return f"device {q.device.type}"
    return None


def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    kv_doc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq) float32)."""
    reason = _fused_case(q, k, causal, q_doc is not None)
    if reason is not None:
        _warn_once(
            "fwd:" + reason,
            f"kernels.attention backend 'sdpa': SDPA's LSE-returning op does not support {reason}; "
            "using the fp32 reference math for these calls (slow; use backend 'triton').",
        )
        return reference.attention_fwd(q, k, v, causal=causal, q_doc=q_doc, kv_doc=kv_doc)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    if q.is_cuda:
        res = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, causal)
        out, lse = res[0], res[1]
    else:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qt, kt, vt, 0.0, causal
        )
    # lse may carry padding columns on some builds: keep exactly (B, Hq, Sq).
    return out.transpose(1, 2), lse[..., : q.shape[1]].float().contiguous()


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
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in the layouts of q, k, v; out and lse may be global (see the contract)."""
    reason = _fused_case(q, k, causal, q_doc is not None)
    if reason is not None:
        _warn_once(
            "bwd:" + reason,
            f"kernels.attention backend 'sdpa': SDPA's backward op does not support {reason}; "
            "using the fp32 reference math for these calls (slow; use backend 'triton').",
        )
        return reference.attention_bwd(
            dout, q, k, v, out, lse, causal=causal, q_doc=q_doc, kv_doc=kv_doc
        )
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    # A merged (ring) output may arrive in fp32; the aten ops want q's dtype for out and dout.
    ot, dot = out.to(q.dtype).transpose(1, 2), dout.to(q.dtype).transpose(1, 2)
    lse = lse.float().contiguous()
    if q.is_cuda:
        sq, skv = q.shape[1], k.shape[1]
        # Dropout is 0, so the philox state is never read; shapes follow the forward's outputs.
        seed = torch.zeros(2, dtype=torch.uint64, device=q.device)
        offset = torch.empty(0, dtype=torch.uint64, device=q.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dot, qt, kt, vt, ot, lse, None, None, sq, skv, 0.0, causal, seed, offset
        )
    else:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dot, qt, kt, vt, ot, lse, 0.0, causal
        )
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)
