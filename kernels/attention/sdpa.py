"""The "sdpa" attention backend: PyTorch's scaled_dot_product_attention and its LSE-returning ops.

`attention` calls `F.scaled_dot_product_attention` (cuDNN / flash / efficient on CUDA, its fused
kernel on CPU) with native GQA. The fwd/bwd pair that context parallelism needs must return and
accept the log-sum-exp, which the public SDPA function hides, so it calls the aten ops underneath:
  CUDA: aten._scaled_dot_product_cudnn_attention(_backward) (cuDNN; ~514 TFLOP/s fwd+bwd on H200
        against ~300 for FlashAttention-2, docs/perf/2026-11-30_h200_attention.txt), or
        aten._scaled_dot_product_flash_attention(_backward) (FlashAttention-2) where cuDNN cannot
        run; `set_cuda_pair_op` forces one. Both take GQA unexpanded. Which one runs is logged once.
  CPU:  aten._scaled_dot_product_flash_attention_for_cpu(_backward) (GQA native)
Both CUDA ops recompute P = exp(q k^T * scale - lse) in the backward from the lse they are given
(delta from dout and out), so a *global* out/lse from a larger attention gives this block's exact
gradient share, as the contract asks; torch's own context parallel relies on the same property.
Their is_causal is top-left aligned; a bottom-right causal call with Sq != Skv is split into the
fully visible key prefix (no mask) and the square diagonal block (causal), merged by lse, so it
stays on the fused kernels. Document masks and fp32 on CUDA run the fp32 reference math for that
call, after one warning naming the case.
"""

from __future__ import annotations

import logging

import torch
import torch.nn.functional as F

from kernels.attention import reference
from kernels.attention.reference import merge_partials

log = logging.getLogger(__name__)
_WARNED: set[str] = set()

PAIR_OPS = ("auto", "cudnn", "flash")
_pair_op = "auto"
_pair_choice: dict[int, str] = {}  # CUDA device index -> "cudnn" | "flash" (decided once)


def _warn_once(key: str, message: str, level: int = logging.WARNING) -> None:
    if key not in _WARNED:
        _WARNED.add(key)
        log.log(level, message)


def set_cuda_pair_op(name: str) -> None:
    """Choose the CUDA op behind attention_fwd/attention_bwd: "auto" (cuDNN when it can run, else
    FlashAttention-2, with one warning saying why), "cudnn" (error if it cannot run) or "flash"."""
    global _pair_op
    if name not in PAIR_OPS:
        raise ValueError(f"kernels.attention.sdpa.set_cuda_pair_op: {name!r} is not one of "
                         f"{list(PAIR_OPS)}")
    _pair_op = name
    _pair_choice.clear()


def _cudnn_unusable(q: torch.Tensor) -> str | None:
    """None when aten's cuDNN attention pair can run on q's device, dtype and head dim; else why."""
    if not hasattr(torch.ops.aten, "_scaled_dot_product_cudnn_attention_backward"):
        return f"torch {torch.__version__} has no aten._scaled_dot_product_cudnn_attention_backward"
    if not torch.backends.cudnn.is_available():
        return "cuDNN is not available in this PyTorch build"
    version = torch.backends.cudnn.version() or 0
    if version < 90000:
        return f"cuDNN {version} is older than 9.0"
    if torch.are_deterministic_algorithms_enabled():
        # FlashAttention-2's backward has a deterministic mode that aten selects; cuDNN's may not.
        return "deterministic algorithms are enabled (run.deterministic)"
    if not torch.backends.cuda.cudnn_sdp_enabled():
        return "cuDNN SDPA was disabled (torch.backends.cuda.enable_cudnn_sdp(False))"
    major, minor = torch.cuda.get_device_capability(q.device)
    if major < 8:
        return f"compute capability {major}.{minor} < 8.0"
    d = q.shape[-1]
    if d % 8 != 0 or d > 128:
        return f"head dim {d} (cuDNN's pair is used for multiples of 8 up to 128)"
    return None


def cuda_pair_op(q: torch.Tensor) -> str:
    """"cudnn" or "flash": the op the CUDA bf16/fp16 pair uses on q's device (decided once)."""
    index = q.device.index if q.device.index is not None else torch.cuda.current_device()
    if index in _pair_choice:
        return _pair_choice[index]
    if _pair_op == "flash":
        choice = "flash"
        log.info("kernels.attention 'sdpa' fwd/bwd pair: FlashAttention-2 "
                 "(aten._scaled_dot_product_flash_attention), as set by set_cuda_pair_op")
    else:
        reason = _cudnn_unusable(q)
        if reason is None:
            choice = "cudnn"
            log.info("kernels.attention 'sdpa' fwd/bwd pair: cuDNN "
                     "(aten._scaled_dot_product_cudnn_attention, cuDNN %s) on cuda:%d",
                     torch.backends.cudnn.version(), index)
        elif _pair_op == "cudnn":
            raise ValueError(f"kernels.attention 'sdpa': the cuDNN pair was requested but "
                             f"cannot run: {reason}")
        else:
            choice = "flash"
            log.warning("kernels.attention 'sdpa' fwd/bwd pair: FlashAttention-2 "
                        "(aten._scaled_dot_product_flash_attention, ~40%% slower than cuDNN on "
                        "H200) because %s", reason)
    _pair_choice[index] = choice
    return choice


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


def _fused_case(q: torch.Tensor, has_doc: bool) -> str | None:
    """None when the aten LSE ops can run this call; otherwise the reason they cannot."""
    if has_doc:
        return "document masks"
    if q.is_cuda and q.dtype not in (torch.bfloat16, torch.float16):
        return f"dtype {q.dtype} on CUDA (the fused ops take bf16/fp16)"
    if not q.is_cuda and q.device.type != "cpu":
        return f"device {q.device.type}"
    return None


def _bhsd(t: torch.Tensor) -> torch.Tensor:
    """(B, S, H, D) -> the (B, H, S, D) view the aten ops take, over a contiguous (B, S, H, D).

    Every tensor of a call gets this one layout (the one F.scaled_dot_product_attention passes
    from a model): cuDNN caches an execution graph per shape and stride, and older releases keyed
    it without out/dout/lse strides, so mixed layouts must never reach it.
    """
    return t.contiguous().transpose(1, 2)


def _fwd_square(q, k, v, causal: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """One fused call; causal only with Sq == Skv (where top-left and bottom-right agree)."""
    b, sq, hq, _ = q.shape
    qt, kt, vt = _bhsd(q), _bhsd(k), _bhsd(v)
    if not q.is_cuda:
        out, lse = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            qt, kt, vt, 0.0, causal)[:2]
    elif cuda_pair_op(q) == "cudnn":
        # (q, k, v, attn_bias, compute_log_sumexp, dropout_p, is_causal, return_debug_mask)
        res = torch.ops.aten._scaled_dot_product_cudnn_attention(
            qt, kt, vt, None, True, 0.0, causal, False)
        out, lse = res[0], res[1]  # lse (B, Hq, Sq, 1) float32
    else:
        res = torch.ops.aten._scaled_dot_product_flash_attention(qt, kt, vt, 0.0, causal)
        out, lse = res[0], res[1]  # lse (B, Hq, Sq), padded on some builds
    lse = lse.reshape(b, hq, -1)[..., :sq]
    return out.transpose(1, 2), lse.float().contiguous()


def _bwd_square(dout, q, k, v, out, lse, causal: bool):
    """Backward of _fwd_square with a possibly global out/lse; (dq, dk, dv) in (B, S, H, D)."""
    sq, skv = q.shape[1], k.shape[1]
    qt, kt, vt = _bhsd(q), _bhsd(k), _bhsd(v)
    # A merged (ring) output may arrive in fp32; the ops want q's dtype for out and dout.
    ot, dot = _bhsd(out.to(q.dtype)), _bhsd(dout.to(q.dtype))
    lse = lse.float().contiguous()  # (B, Hq, Sq); a strided lse gives wrong results in cuDNN
    if not q.is_cuda:
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu_backward(
            dot, qt, kt, vt, ot, lse, 0.0, causal)
    elif cuda_pair_op(q) == "cudnn":
        # Dropout is 0, so the philox seed/offset are never read. max_q/max_k are the lengths the
        # kernel runs with; attn_bias and cum_seq_* undefined select the dense path.
        rng = torch.zeros((), dtype=torch.int64, device=q.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_cudnn_attention_backward(
            dot, qt, kt, vt, ot, lse.unsqueeze(-1), rng, rng, None, None, None, sq, skv, 0.0,
            causal)
    else:
        seed = torch.zeros(2, dtype=torch.uint64, device=q.device)
        offset = torch.empty(0, dtype=torch.uint64, device=q.device)
        dq, dk, dv = torch.ops.aten._scaled_dot_product_flash_attention_backward(
            dot, qt, kt, vt, ot, lse, None, None, sq, skv, 0.0, causal, seed, offset)
    return dq.transpose(1, 2), dk.transpose(1, 2), dv.transpose(1, 2)


def _causal_split(sq: int, skv: int) -> tuple[int, int]:
    """Bottom-right causal with Sq != Skv as fused calls: (dead, prefix).

    Sq > Skv: the first dead = Sq - Skv queries see no key (out 0, lse -inf), the rest is square.
    Sq < Skv: every query sees the first prefix = Skv - Sq keys unmasked, the rest is square.
    """
    return max(sq - skv, 0), max(skv - sq, 0)


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
    reason = _fused_case(q, q_doc is not None)
    if reason is not None:
        _warn_once(
            "fwd:" + reason,
            f"kernels.attention backend 'sdpa': SDPA's LSE-returning op does not support {reason}; "
            "using the fp32 reference math for these calls (slow; use backend 'triton').",
        )
        return reference.attention_fwd(q, k, v, causal=causal, q_doc=q_doc, kv_doc=kv_doc)
    sq, skv = q.shape[1], k.shape[1]
    if not causal or sq == skv:
        return _fwd_square(q, k, v, causal)
    dead, prefix = _causal_split(sq, skv)
    if dead:
        b, _, hq, _ = q.shape
        out = q.new_zeros(q.shape)
        lse = torch.full((b, hq, sq), float("-inf"), dtype=torch.float32, device=q.device)
        if skv > 0:
            out[:, dead:], lse[:, :, dead:] = _fwd_square(q[:, dead:], k, v, True)
        return out, lse
    out_a, lse_a = _fwd_square(q, k[:, :prefix], v[:, :prefix], False)
    out_b, lse_b = _fwd_square(q, k[:, prefix:], v[:, prefix:], True)
    out, lse = merge_partials(out_a, lse_a, out_b, lse_b)  # out fp32
    return out.to(q.dtype), lse


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
    reason = _fused_case(q, q_doc is not None)
    if reason is not None:
        _warn_once(
            "bwd:" + reason,
            f"kernels.attention backend 'sdpa': SDPA's backward op does not support {reason}; "
            "using the fp32 reference math for these calls (slow; use backend 'triton').",
        )
        return reference.attention_bwd(
            dout, q, k, v, out, lse, causal=causal, q_doc=q_doc, kv_doc=kv_doc
        )
    sq, skv = q.shape[1], k.shape[1]
    if not causal or sq == skv:
        return _bwd_square(dout, q, k, v, out, lse, causal)
    dead, prefix = _causal_split(sq, skv)
    if dead:
        # Rows that see nothing have zero gradients; the others are a square causal block.
        dq = q.new_zeros(q.shape)
        dk, dv = k.new_zeros(k.shape), v.new_zeros(v.shape)
        if skv > 0:
            dq[:, dead:], dk, dv = _bwd_square(dout[:, dead:], q[:, dead:], k, v, out[:, dead:],
                                               lse[:, :, dead:], True)
        return dq, dk, dv
    # Each key block's backward with the global out/lse is that block's exact share.
    dq_a, dk_a, dv_a = _bwd_square(dout, q, k[:, :prefix], v[:, :prefix], out, lse, False)
    dq_b, dk_b, dv_b = _bwd_square(dout, q, k[:, prefix:], v[:, prefix:], out, lse, True)
    dq = (dq_a.float() + dq_b.float()).to(q.dtype)
    return dq, torch.cat([dk_a, dk_b], dim=1), torch.cat([dv_a, dv_b], dim=1)
