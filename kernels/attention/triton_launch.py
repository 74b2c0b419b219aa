"""How the Triton attention kernels are launched: settings, TMA descriptors, and one function per
launch (fwd; backward preprocess, dK/dV, dQ), so kernels/attention/bench.py can time each alone.

On GPU every kernel is autotuned over a small config set (triton_fwd / triton_bwd) unless
SETTINGS.config_override pins one; fp32 inputs get one small tile per kernel instead (a debug path:
tuned() picks the kernel object by dtype); in Triton's CPU interpreter (TRITON_INTERPRET=1, tests)
fixed small blocks are used instead (INTERPRET_BLOCKS).
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
from collections.abc import Iterator
from dataclasses import dataclass, field

import torch
import triton

# Kernels are looked up as module attributes at call time, so a test can re-import the kernel
# modules under TRITON_INTERPRET=1 without re-registering the custom ops of triton_op.
from kernels.attention import triton_blocks, triton_bwd, triton_fwd

DQ_MODES = ("recompute", "atomic", "tma_atomic")
_DQ_ATOMIC = {"recompute": 0, "atomic": 1, "tma_atomic": 2}  # the kernels' DQ_ATOMIC constexpr


@dataclass
class Settings:
    """Implementation choices of the "triton" backend; all compute the same attention (up to
    rounding order). Defaults: the configuration measured on H200 in
    docs/perf/2026-11-30_h200_attention.txt, with the TMA forward that measured faster there.
    `python -m kernels.bench attention --sweep` measures every alternative."""

    fwd_tma: bool = True
    """Forward: Q/K/V through TMA tensor descriptors (Hopper+, where the layout allows it;
    otherwise pointer loads). Measured 470 -> 495 TFLOP/s on the ANCHORS shape."""
    dkdv_tma: bool = False
    """Backward: the dK/dV kernel streams Q/dO through TMA descriptors."""
    dq_tma: bool = False
    """Backward: the dQ kernel ("recompute" mode) streams K/V through TMA descriptors."""
    dq_mode: str = "recompute"
    """How the backward gets dQ: "recompute" (second kernel, deterministic), "atomic" (fp32
    element atomics from the dK/dV kernel) or "tma_atomic" (TMA bulk reductions from the dK/dV
    kernel, Hopper+). torch.use_deterministic_algorithms(True) forces "recompute"."""
    dkdv_heads_inner: bool = False
    """dK/dV loop order: True = query blocks descending with the group's heads inner (programs
    that run together share Q/dO and dQ tiles in L2); False = head-major."""
    dkdv_split: int | None = None
    """Split each query-head group over this many dK/dV programs (a divisor of the group size);
    None = chosen by dkdv_split() from the SM count."""
    config_override: dict[str, tuple[int, int, int, int]] = field(default_factory=dict)
    """Pinned tiles per kernel ("fwd", "dkdv", "dq") -> (BLOCK_M, BLOCK_N, num_warps,
    num_stages) instead of autotuning: for sweeps and timing-independent runs."""


SETTINGS = Settings()


@contextlib.contextmanager
def settings(**changes) -> Iterator[Settings]:
    """Temporarily change fields of SETTINGS (restored on exit, also after an error)."""
    bad = [k for k in changes if k not in {f.name for f in dataclasses.fields(Settings)}]
    if bad:
        raise ValueError(f"kernels.attention.triton_launch.settings: unknown field(s) {bad}; "
                         f"valid: {', '.join(f.name for f in dataclasses.fields(Settings))}")
    old = {k: getattr(SETTINGS, k) for k in changes}
    for k, v in changes.items():
        setattr(SETTINGS, k, v)
    try:
        yield SETTINGS
    finally:
        for k, v in old.items():
            setattr(SETTINGS, k, v)


# (BLOCK_M queries, BLOCK_N keys) per kernel in the interpreter; deliberately unequal so the tests
# cover query and key blocks of different sizes. Multiples of triton_blocks.INTERPRET_GRANULE.
INTERPRET_BLOCKS = {"fwd": (32, 16), "dkdv": (16, 32), "dq": (32, 16)}


def interpreted() -> bool:
    """Whether @triton.jit produced interpreted kernels: fixed when triton_fwd was imported
    (setting TRITON_INTERPRET afterwards has no effect on already-decorated kernels)."""
    return type(triton_fwd.attn_fwd_kernel).__name__ == "InterpretedFunction"


def granule(dtype: torch.dtype) -> int:
    """Granule of the document range tables: it must divide every block size the launch uses."""
    if interpreted():
        return triton_blocks.INTERPRET_GRANULE
    return triton_blocks.GPU_GRANULE_FP32 if dtype == torch.float32 else triton_blocks.GPU_GRANULE


# (kernel, TMA descriptors, fp32 inputs) -> (module, attribute) of the autotuned kernel object;
# looked up at call time because tests re-import the kernel modules (see above).
_TUNED = {
    ("fwd", False, False): (triton_fwd, "attn_fwd_tuned"),
    ("fwd", True, False): (triton_fwd, "attn_fwd_tma_tuned"),
    ("fwd", False, True): (triton_fwd, "attn_fwd_fp32_tuned"),
    ("fwd", True, True): (triton_fwd, "attn_fwd_tma_fp32_tuned"),
    ("dkdv", False, False): (triton_bwd, "attn_bwd_dkdv_tuned"),
    ("dkdv", False, True): (triton_bwd, "attn_bwd_dkdv_fp32_tuned"),
    ("dq", False, False): (triton_bwd, "attn_bwd_dq_tuned"),
    ("dq", False, True): (triton_bwd, "attn_bwd_dq_fp32_tuned"),
}


def bsh_strides(*tensors: torch.Tensor) -> tuple[int, ...]:
    """(batch, sequence, head) strides of each (B, S, H, D) tensor, in order: the kernels' stride_*b,
    stride_*s, stride_*h arguments (D is contiguous)."""
    return tuple(t.stride(i) for t in tensors for i in range(3))


def tuned(name: str, dtype: torch.dtype, tma: bool = False):
    """The autotuned kernel object that launches `name` ("fwd", "dkdv", "dq") on GPU for inputs
    of `dtype`: bf16/fp16 tune over the measured tile sets, fp32 runs one small tile (its
    exact-math dots compile slowly and spill at bf16 tile sizes; see triton_fwd.FWD_TILES_FP32).
    `tma` selects the forward's descriptor variant; the backward kernels size theirs in pre_hooks.
    """
    module, attr = _TUNED[(name, tma and name == "fwd", dtype == torch.float32)]
    return getattr(module, attr)


def _launch(name: str, raw, tuned, grid, args: tuple, meta: dict, pre_hook=None) -> None:
    """Launch one kernel: fixed blocks in the interpreter, a pinned config, or the autotuner.

    pre_hook(nargs) is the config pre_hook of the autotuned kernel (sizing TMA descriptor blocks,
    zeroing accumulators); for a fixed config it is called here with the same names."""
    if interpreted() or name in SETTINGS.config_override:
        if interpreted():
            bm, bn = INTERPRET_BLOCKS[name]
            opts = {}
        else:
            bm, bn, warps, stages = SETTINGS.config_override[name]
            opts = dict(num_warps=warps, num_stages=stages)
        if pre_hook is not None:
            pre_hook({**dict(zip(raw.arg_names, args)), **meta, "BLOCK_M": bm, "BLOCK_N": bn})
        raw[grid({"BLOCK_M": bm, "BLOCK_N": bn})](*args, **meta, BLOCK_M=bm, BLOCK_N=bn, **opts)
    else:
        tuned[grid](*args, **meta)


def _hopper(device: torch.device) -> bool:
    """TMA available: compute capability 9+, or CPU tensors (the interpreter emulates it)."""
    return device.type != "cuda" or torch.cuda.get_device_capability(device)[0] >= 9


def descriptor(t: torch.Tensor):
    """TMA descriptor of the 2-D view (B * S, H * D) of a (B, S, H, D) tensor, or None where the
    layout does not allow one: heads packed (stride over heads == D), batches evenly spaced in
    rows, 16-byte aligned base and row stride (TMA's rules); a head slice of a fused QKV tensor
    qualifies. Block shapes are set per config by the kernels' pre_hooks."""
    try:
        from triton.tools.tensor_descriptor import TensorDescriptor
    except ImportError:  # triton without host-side descriptors
        return None
    if not _hopper(t.device):
        return None
    b, s, h, d = t.shape
    size = t.element_size()
    if t.stride(3) != 1 or t.stride(2) != d or (b > 1 and t.stride(0) != s * t.stride(1)):
        return None
    if t.data_ptr() % 16 or (t.stride(1) * size) % 16 or t.stride(1) < h * d:
        return None
    return TensorDescriptor(t, shape=[b * s, h * d], strides=[t.stride(1), 1], block_shape=[16, d])


def _descriptors(*ts: torch.Tensor):
    descs = tuple(descriptor(t) for t in ts)
    return None if any(x is None for x in descs) else descs


def _docs(q_doc, kv_doc, device, gran, transpose=False):
    """(q_doc, kv_doc, lo, hi, table stride, n granules) for the kernels; dummies without docs."""
    if q_doc is None or kv_doc is None:
        dummy = torch.zeros(1, dtype=torch.int32, device=device)
        return dummy, dummy, dummy, dummy, 1, 0
    qd = q_doc.to(torch.int32).contiguous()
    kd = kv_doc.to(torch.int32).contiguous()
    lo, hi = triton_blocks.doc_ranges(kd, qd, gran) if transpose else triton_blocks.doc_ranges(
        qd, kd, gran
    )
    return qd, kd, lo, hi, lo.stride(0), lo.shape[1]


def prec(q: torch.Tensor) -> str:
    # fp32 inputs: exact fp32 products (tf32 would not meet the reference tolerances).
    return "ieee" if q.dtype == torch.float32 else "tf32"


def fwd(q, k, v, causal: bool, q_doc, kv_doc, out: torch.Tensor, lse: torch.Tensor) -> None:
    """Forward into out (B, Sq, Hq, D) and lse (B, Hq, Sq) fp32 (q, k, v last-dim contiguous)."""
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    gran = granule(q.dtype)
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran)
    descs = _descriptors(q, k, v) if SETTINGS.fwd_tma else None
    args = (
        q, k, v, out, lse, qd, kd, lo, hi, *(descs or (None, None, None)),
        *bsh_strides(q, k, v, out),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hq // hkv, sq, skv, n_gran, 1.0 / math.sqrt(d),
        triton_blocks.seq_bucket(sq), triton_blocks.seq_bucket(skv),
    )
    meta = dict(HEAD_DIM=d, CAUSAL=causal, HAS_DOC=q_doc is not None, GRAN=gran,
                TMA=descs is not None, PREC=prec(q))
    grid = lambda m: (b * hq, triton.cdiv(sq, m["BLOCK_M"]))  # noqa: E731
    _launch("fwd", triton_fwd.attn_fwd_kernel, tuned("fwd", q.dtype, descs is not None), grid,
            args, meta, pre_hook=triton_fwd.set_tma_blocks)


def bwd_preprocess(out, dout, lse, dlse) -> tuple[torch.Tensor, torch.Tensor]:
    """(delta, lse2), each (B, Hq, Sq) fp32: rowsum(dO * O) - dlse and lse * log2(e)."""
    b, sq, hq, d = out.shape
    lse = lse.float().contiguous()
    delta = torch.empty_like(lse)
    lse2 = torch.empty_like(lse)
    has_dlse = dlse is not None
    dlse_t = dlse.float().contiguous() if has_dlse else lse
    block = 16 if interpreted() else 64
    triton_bwd.attn_bwd_preprocess_kernel[(b * hq, triton.cdiv(sq, block))](
        out, dout, lse, dlse_t, delta, lse2,
        *bsh_strides(out, dout),
        hq, sq, HEAD_DIM=d, HAS_DLSE=has_dlse, BLOCK_M=block,
    )
    return delta, lse2


def dq_mode() -> str:
    """The effective dQ mode: SETTINGS.dq_mode unless deterministic algorithms are requested."""
    if SETTINGS.dq_mode not in DQ_MODES:
        raise ValueError(f"kernels.attention.triton_launch.SETTINGS.dq_mode is "
                         f"{SETTINGS.dq_mode!r}; valid: {', '.join(DQ_MODES)}")
    return "recompute" if torch.are_deterministic_algorithms_enabled() else SETTINGS.dq_mode


def dkdv_split(b: int, hkv: int, g: int, skv: int, device: torch.device) -> int:
    """How many programs share one KV head's query-head group in the dK/dV kernel.

    One program per (batch, KV head, key block of 128) leaves SMs idle when there are few KV heads
    (Llama-3 70B under TP 8 has one per GPU: 64 programs at S = 8192 on 132 SMs). Split the group
    (a divisor of G) until there are at least two programs per SM; partials are summed after.
    """
    if SETTINGS.dkdv_split is not None:
        if g % SETTINGS.dkdv_split:
            raise ValueError(f"kernels.attention.triton_launch.SETTINGS.dkdv_split="
                             f"{SETTINGS.dkdv_split} must divide the query-head group size {g}")
        return SETTINGS.dkdv_split
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


def bwd_dkdv(q, k, v, dout, lse2, delta, causal: bool, q_doc, kv_doc, mode: str,
             dk: torch.Tensor, dv: torch.Tensor) -> torch.Tensor | None:
    """dK, dV into dk, dv (B, Skv, Hkv, D); with an atomic mode also dQ, returned as an fp32
    (B, Hq, Sq, D) buffer (already scaled), else None."""
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    atomic = _DQ_ATOMIC[mode]
    if atomic == 2 and not _hopper(q.device):
        raise ValueError("kernels.attention: dq_mode 'tma_atomic' needs TMA (compute capability "
                         ">= 9.0); use 'recompute' or 'atomic'")
    if atomic == 2 and b * hq * sq >= 2**31:
        raise ValueError(f"kernels.attention: dq_mode 'tma_atomic' addresses rows with int32; "
                         f"B * Hq * Sq = {b * hq * sq} is too large, use 'recompute'")
    if atomic:
        # (B, Hq, Sq, D): one (BM, D) tile is contiguous. Autotuned launches zero it in the
        # config pre_hook (also between tuning runs); raw launches too (triton_bwd.dkdv_pre_hook).
        dq_acc = torch.empty((b, hq, sq, d), dtype=torch.float32, device=q.device)
    else:
        dq_acc = torch.zeros(1, 1, 1, 1, dtype=torch.float32, device=q.device)
    dq_view = dq_acc.transpose(1, 2)  # strides of a (B, Sq, Hq, D) tensor
    desc_dq = None
    if atomic == 2:
        from triton.tools.tensor_descriptor import TensorDescriptor

        desc_dq = TensorDescriptor(dq_acc, shape=[b * hq * sq, d], strides=[d, 1],
                                   block_shape=[16, d])
    descs = _descriptors(q, dout) if SETTINGS.dkdv_tma else None
    gran = granule(q.dtype)
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran, transpose=True)
    split = dkdv_split(b, hkv, hq // hkv, skv, q.device)
    if split > 1:  # fp32 partial dK/dV per slice of the query-head group, summed below
        dk_out = torch.empty((b, skv, hkv * split, d), dtype=torch.float32, device=q.device)
        dv_out = torch.empty_like(dk_out)
    else:
        dk_out, dv_out = dk, dv
    args = (
        q, k, v, dout, lse2, delta, dk_out, dv_out, dq_acc, qd, kd, lo, hi,
        *(descs or (None, None)), desc_dq,
        *bsh_strides(q, k, v, dout, dk_out, dv_out, dq_view),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hkv, hq // hkv, split, sq, skv, n_gran, 1.0 / math.sqrt(d),
        triton_blocks.seq_bucket(sq), triton_blocks.seq_bucket(skv),
    )
    meta = dict(HEAD_DIM=d, CAUSAL=causal, HAS_DOC=q_doc is not None, GRAN=gran,
                DQ_ATOMIC=atomic, TMA=descs is not None, HEADS_INNER=SETTINGS.dkdv_heads_inner,
                PREC=prec(q))
    if interpreted() and atomic == 2:
        _interpreter_descriptor_reduce()
    grid = lambda m: (b * hkv * split, triton.cdiv(skv, m["BLOCK_N"]))  # noqa: E731
    _launch("dkdv", triton_bwd.attn_bwd_dkdv_kernel, tuned("dkdv", q.dtype), grid, args, meta,
            pre_hook=triton_bwd.dkdv_pre_hook)
    if split > 1:
        dk.copy_(dk_out.view(b, skv, hkv, split, d).sum(3))
        dv.copy_(dv_out.view(b, skv, hkv, split, d).sum(3))
    return dq_acc if atomic else None


def bwd_dq(q, k, v, dout, lse2, delta, causal: bool, q_doc, kv_doc, dq: torch.Tensor) -> None:
    """dQ by recomputation into dq (B, Sq, Hq, D)."""
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    descs = _descriptors(k, v) if SETTINGS.dq_tma else None
    gran = granule(q.dtype)
    qd, kd, lo, hi, stride_tbl, n_gran = _docs(q_doc, kv_doc, q.device, gran)
    args = (
        q, k, v, dout, lse2, delta, dq, qd, kd, lo, hi, *(descs or (None, None)),
        *bsh_strides(q, k, v, dout, dq),
        qd.stride(0), kd.stride(0), stride_tbl,
        hq, hq // hkv, sq, skv, n_gran, 1.0 / math.sqrt(d),
        triton_blocks.seq_bucket(sq), triton_blocks.seq_bucket(skv),
    )
    meta = dict(HEAD_DIM=d, CAUSAL=causal, HAS_DOC=q_doc is not None, GRAN=gran,
                TMA=descs is not None, PREC=prec(q))
    grid = lambda m: (b * hq, triton.cdiv(sq, m["BLOCK_M"]))  # noqa: E731
    _launch("dq", triton_bwd.attn_bwd_dq_kernel, tuned("dq", q.dtype), grid, args, meta,
            pre_hook=triton_bwd.dq_pre_hook)


def bwd(dout, q, k, v, out, lse, causal: bool, q_doc, kv_doc, dlse,
        dq: torch.Tensor, dk: torch.Tensor, dv: torch.Tensor) -> None:
    """The whole backward into dq, dk, dv (inputs last-dim contiguous, sequences non-empty)."""
    delta, lse2 = bwd_preprocess(out, dout, lse, dlse)
    mode = dq_mode()
    dq_acc = bwd_dkdv(q, k, v, dout, lse2, delta, causal, q_doc, kv_doc, mode, dk, dv)
    if dq_acc is None:
        bwd_dq(q, k, v, dout, lse2, delta, causal, q_doc, kv_doc, dq)
    else:
        dq.copy_(dq_acc.transpose(1, 2))


def _interpreter_descriptor_reduce() -> None:
    """Triton's CPU interpreter (3.6 to 3.9) lacks the builder op behind descriptor.atomic_add; add
    it, with TMA's semantics (an element-wise add of the in-bounds part of the box), if missing."""
    from triton._C.libtriton import interpreter as _interp
    from triton._C.libtriton import ir as _ir
    from triton.runtime.interpreter import InterpreterBuilder

    if hasattr(InterpreterBuilder, "create_descriptor_reduce"):
        return

    def create_descriptor_reduce(self, kind, desc, value, indices):
        if kind != _ir.DESCRIPTOR_REDUCE_KIND.ADD:
            raise NotImplementedError(f"interpreted descriptor reduce {kind}")
        ptrs, mask = desc.materialize_pointers(indices)
        _interp.atomic_rmw(_interp.RMW_OP.FADD, ptrs.data, value.data, mask.data,
                           _interp.MEM_SEMANTIC.RELAXED)

    InterpreterBuilder.create_descriptor_reduce = create_descriptor_reduce
