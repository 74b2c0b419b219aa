"""The "triton" attention backend as torch custom ops, so torch.compile, FSDP2 and DTensor see
opaque ops with known output shapes:

    titankit::flash_attn_fwd(q, k, v, causal, q_doc, kv_doc) -> (out, lse)
    titankit::flash_attn_bwd(dout, q, k, v, out, lse, causal, q_doc, kv_doc, dlse) -> (dq, dk, dv)

flash_attn_fwd has an autograd formula (the backward op), so `attention(..., backend="triton")` is
differentiable, also through lse (dlse enters the backward as delta -= dlse).
On GPU every kernel is autotuned over a small config set (triton_fwd / triton_bwd); in Triton's CPU
interpreter (TRITON_INTERPRET=1, tests) fixed small blocks are used instead (INTERPRET_BLOCKS).

Module-level knobs (kernels/attention/bench.py measures each): DQ_MODE ("recompute" | "atomic"),
FWD_TMA (tensor-descriptor loads in the forward), DKDV_SPLIT (query-head group split of the dK/dV
grid; None = automatic) and CONFIG_OVERRIDE (pinned tile configs instead of autotuning).
"""

from __future__ import annotations

import math

import torch
import triton

# Kernels are looked up as module attributes at call time, so a test can re-import the kernel
# modules under TRITON_INTERPRET=1 without re-registering the custom ops defined here.
from kernels.attention import triton_blocks, triton_bwd, triton_fwd

HEAD_DIMS = (16, 32, 64, 128)
DTYPES = (torch.bfloat16, torch.float16, torch.float32)
# (BLOCK_M queries, BLOCK_N keys) per kernel in the interpreter; deliberately unequal so the tests
# cover query and key blocks of different sizes. Multiples of triton_blocks.INTERPRET_GRANULE.
INTERPRET_BLOCKS = {"fwd": (32, 16), "dkdv": (16, 32), "dq": (32, 16)}


def interpreted() -> bool:
    """Whether @triton.jit produced interpreted kernels: fixed when triton_fwd was imported
    (setting TRITON_INTERPRET afterwards has no effect on already-decorated kernels)."""
    return type(triton_fwd.attn_fwd_kernel).__name__ == "InterpretedFunction"


# Pinned tile configs, kernel name ("fwd", "dkdv", "dq") -> (BLOCK_M, BLOCK_N, num_warps,
# num_stages), bypassing the autotuner: for config sweeps (kernels/attention/bench.py) and for runs
# that must not depend on autotuning timings.
CONFIG_OVERRIDE: dict[str, tuple[int, int, int, int]] = {}


def _launch(name: str, raw, tuned, grid, args: tuple, meta: dict, raw_pre_hook=None) -> None:
    """Launch one kernel: fixed blocks in the interpreter, a pinned config, or the autotuner.

    raw_pre_hook(BLOCK_M, BLOCK_N) does for a fixed config what the autotuner's config pre_hook
    does (e.g. sizing TMA descriptor blocks)."""
    if interpreted():
        bm, bn = INTERPRET_BLOCKS[name]
        if raw_pre_hook is not None:
            raw_pre_hook(bm, bn)
        raw[grid({"BLOCK_M": bm, "BLOCK_N": bn})](*args, **meta, BLOCK_M=bm, BLOCK_N=bn)
    elif name in CONFIG_OVERRIDE:
        bm, bn, warps, stages = CONFIG_OVERRIDE[name]
        if raw_pre_hook is not None:
            raw_pre_hook(bm, bn)
        raw[grid({"BLOCK_M": bm, "BLOCK_N": bn})](
            *args, **meta, BLOCK_M=bm, BLOCK_N=bn, num_warps=warps, num_stages=stages
        )
    else:
        tuned[grid](*args, **meta)


# How the backward computes dQ: "recompute" (a separate kernel recomputes S and dP: 7 block
# matmuls per block pair, deterministic) or "atomic" (fp32 atomics from the dK/dV kernel: 5 matmuls,
# not bitwise reproducible). torch.use_deterministic_algorithms(True) forces "recompute".
DQ_MODES = ("recompute", "atomic")
DQ_MODE = "recompute"


def _atomic_dq() -> bool:
    if DQ_MODE not in DQ_MODES:
        raise ValueError(
            f"kernels.attention.triton_op.DQ_MODE is {DQ_MODE!r}; valid: {', '.join(DQ_MODES)}"
        )
    return DQ_MODE == "atomic" and not torch.are_deterministic_algorithms_enabled()


# Split each query-head group over this many dK/dV programs (None: chosen by _dkdv_split).
DKDV_SPLIT: int | None = None


def _dkdv_split(b: int, hkv: int, g: int, skv: int, device: torch.device) -> int:
    """How many programs share one KV head's query-head group in the dK/dV kernel.

    One program per (batch, KV head, key block of 128) leaves SMs idle when there are few KV heads
    (Llama-3 70B under TP 8 has one per GPU: 64 programs at S = 8192 on 132 SMs). Split the group
    (a divisor of G) until there are at least two programs per SM; partials are summed after.
    """
    if DKDV_SPLIT is not None:
        if g % DKDV_SPLIT:
            raise ValueError(f"triton_op.DKDV_SPLIT={DKDV_SPLIT} must divide the group size {g}")
        return DKDV_SPLIT
    if device.type != "cuda":
        return 1
    target = 2 * torch.cuda.get_device_properties(device).multi_processor_count
    programs = b * hkv * triton.cdiv(skv, 128)
    split = 1
    while programs * split < target and split < g:
        split += 1
        while g % split:
            split += 1
    return split


def _validate(q: torch.Tensor) -> None:
    where = "kernels.attention backend 'triton'"
    if q.shape[-1] not in HEAD_DIMS:
        raise ValueError(f"{where}: head dim {q.shape[-1]} is not supported; valid: {HEAD_DIMS}")
    if q.dtype not in DTYPES:
        raise ValueError(f"{where}: dtype {q.dtype} is not supported; valid: bf16, fp16, fp32")
    if not q.is_cuda and not interpreted():
        raise ValueError(
            f"{where} needs CUDA tensors (got device {q.device}); on CPU use backend 'sdpa' or "
            "'reference', or set TRITON_INTERPRET=1 before importing triton (slow, for tests)"
        )


def _granule() -> int:
    return triton_blocks.INTERPRET_GRANULE if interpreted() else triton_blocks.GPU_GRANULE


def _last_dim_contiguous(t: torch.Tensor) -> torch.Tensor:
    return t if t.stride(-1) == 1 else t.contiguous()


def _prec(q: torch.Tensor) -> str:
    # fp32 inputs: exact fp32 products (tf32 would not meet the reference tolerances).
    return "ieee" if q.dtype == torch.float32 else "tf32"


# Forward K/V (and Q) loads through TMA tensor descriptors (Hopper+), when the layout allows it.
FWD_TMA = False


def _tma_descriptors(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor):
    """Descriptors of the 2-D views (B * S, H * D) of q, k, v, or None where TMA cannot be used.

    Needs heads packed (stride over heads == D), batches evenly spaced in rows, and 16-byte aligned
    bases and row strides (TMA's rules); a slice of a fused QKV tensor qualifies.
    """
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # triton without host-side descriptors
        return None
    if q.is_cuda and torch.cuda.get_device_capability(q.device)[0] < 9:
        return None
    descs = []
    for t in (q, k, v):
        b, s, h, d = t.shape
        size = t.element_size()
        if t.stride(2) != d or (b > 1 and t.stride(0) != s * t.stride(1)):
            return None
        if t.data_ptr() % 16 or (t.stride(1) * size) % 16 or t.stride(1) < h * d:
            return None
        descs.append(TensorDescriptor(t, shape=[b * s, h * d], strides=[t.stride(1), 1],
                                      block_shape=[16, d]))
    return tuple(descs)


def _docs(q_doc, kv_doc, device, gran, transpose=False):
    """(q_doc, kv_doc, lo, hi) int32 tensors for the kernels; 1-element dummies without docs."""
    if q_doc is None or kv_doc is None:
        dummy = torch.zeros(1, dtype=torch.int32, device=device)
        return dummy, dummy, dummy, dummy, 1, 0
    qd = q_doc.to(torch.int32).contiguous()
    kd = kv_doc.to(torch.int32).contiguous()
    lo, hi = triton_blocks.doc_ranges(kd, qd, gran) if transpose else triton_blocks.doc_ranges(
        qd, kd, gran
    )
    return qd, kd, lo, hi, lo.stride(0), lo.shape[1]


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
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    out = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    if sq == 0 or b * hq == 0:
        return out, lse
    gran = _granule()
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran)
    descs = _tma_descriptors(q, k, v) if FWD_TMA else None
    args = (
        q, k, v, out, lse, qd, kd, lo, hi, *(descs or (None, None, None)),
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        out.stride(0), out.stride(1), out.stride(2),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hq // hkv, sq, skv, n_gran, 1.0 / math.sqrt(d),
        triton_blocks.seq_bucket(sq), triton_blocks.seq_bucket(skv),
    )
    meta = dict(HEAD_DIM=d, CAUSAL=causal, HAS_DOC=q_doc is not None, GRAN=gran,
                TMA=descs is not None, PREC=_prec(q))
    grid = lambda m: (b * hq, triton.cdiv(sq, m["BLOCK_M"]))  # noqa: E731
    if descs is None:
        _launch("fwd", triton_fwd.attn_fwd_kernel, triton_fwd.attn_fwd_tuned, grid, args, meta)
    else:
        def size_blocks(bm: int, bn: int) -> None:
            desc_q, desc_k, desc_v = descs
            triton_fwd.set_tma_blocks(dict(TMA=True, HEAD_DIM=d, BLOCK_M=bm, BLOCK_N=bn,
                                           DescQ=desc_q, DescK=desc_k, DescV=desc_v))

        _launch("fwd", triton_fwd.attn_fwd_kernel, triton_fwd.attn_fwd_tma_tuned, grid, args,
                meta, raw_pre_hook=size_blocks)
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
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    dq = torch.empty(q.shape, dtype=q.dtype, device=q.device)
    dk = torch.empty(k.shape, dtype=k.dtype, device=k.device)
    dv = torch.empty(v.shape, dtype=v.dtype, device=v.device)
    if sq == 0 or skv == 0 or b * hq == 0:
        return dq.zero_(), dk.zero_(), dv.zero_()
    lse = lse.float().contiguous()
    delta = torch.empty_like(lse)
    lse2 = torch.empty_like(lse)
    interp = interpreted()
    has_dlse = dlse is not None
    dlse_t = dlse.float().contiguous() if has_dlse else lse
    pre_block = 16 if interp else 64
    triton_bwd.attn_bwd_preprocess_kernel[(b * hq, triton.cdiv(sq, pre_block))](
        out, dout, lse, dlse_t, delta, lse2,
        out.stride(0), out.stride(1), out.stride(2), dout.stride(0), dout.stride(1), dout.stride(2),
        hq, sq, HEAD_DIM=d, HAS_DLSE=has_dlse, BLOCK_M=pre_block,
    )
    gran = _granule()
    strides = (
        q.stride(0), q.stride(1), q.stride(2),
        k.stride(0), k.stride(1), k.stride(2),
        v.stride(0), v.stride(1), v.stride(2),
        dout.stride(0), dout.stride(1), dout.stride(2),
    )
    buckets = (triton_blocks.seq_bucket(sq), triton_blocks.seq_bucket(skv))
    meta = dict(HEAD_DIM=d, CAUSAL=causal, HAS_DOC=q_doc is not None, GRAN=gran, PREC=_prec(q))
    sm_scale = 1.0 / math.sqrt(d)

    # dK/dV (and dQ in atomic mode): document ranges per key granule (queries and keys swapped).
    atomic = _atomic_dq()
    if atomic:
        # The autotuned launch zeroes it in a config pre_hook (also between tuning runs).
        tuned = not interp and "dkdv" not in CONFIG_OVERRIDE
        alloc = torch.empty if tuned else torch.zeros
        dq_acc = alloc(q.shape, dtype=torch.float32, device=q.device)
    else:
        dq_acc = torch.zeros(1, 1, 1, dtype=torch.float32, device=q.device)
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran, transpose=True)
    split = _dkdv_split(b, hkv, hq // hkv, skv, q.device)
    if split > 1:  # fp32 partial dK/dV per slice of the query-head group, summed below
        dk_out = torch.empty((b, skv, hkv * split, d), dtype=torch.float32, device=q.device)
        dv_out = torch.empty_like(dk_out)
    else:
        dk_out, dv_out = dk, dv
    args = (
        q, k, v, dout, lse2, delta, dk_out, dv_out, dq_acc, qd, kd, lo, hi, *strides,
        dk_out.stride(0), dk_out.stride(1), dk_out.stride(2),
        dv_out.stride(0), dv_out.stride(1), dv_out.stride(2),
        dq_acc.stride(0), dq_acc.stride(1), dq_acc.stride(2),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hkv, hq // hkv, split, sq, skv, n_gran, sm_scale, *buckets,
    )
    grid = lambda m: (b * hkv * split, triton.cdiv(skv, m["BLOCK_N"]))  # noqa: E731
    _launch("dkdv", triton_bwd.attn_bwd_dkdv_kernel, triton_bwd.attn_bwd_dkdv_tuned, grid, args,
            {**meta, "ATOMIC_DQ": atomic})
    if split > 1:
        dk.copy_(dk_out.view(b, skv, hkv, split, d).sum(3))
        dv.copy_(dv_out.view(b, skv, hkv, split, d).sum(3))
    if atomic:
        return dq_acc.to(q.dtype), dk, dv

    # dQ: document ranges per query granule, as in the forward.
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran)
    args = (
        q, k, v, dout, lse2, delta, dq, qd, kd, lo, hi, *strides,
        dq.stride(0), dq.stride(1), dq.stride(2),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hq // hkv, sq, skv, n_gran, sm_scale, *buckets,
    )
    grid = lambda m: (b * hq, triton.cdiv(sq, m["BLOCK_M"]))  # noqa: E731
    _launch("dq", triton_bwd.attn_bwd_dq_kernel, triton_bwd.attn_bwd_dq_tuned, grid, args, meta)
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
