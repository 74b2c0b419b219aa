"""FP8 (e4m3) quantization and scaled GEMMs behind one backend switch.

- `quantize(x, granularity, layout, backend, amax_reduce)` -> (q, inv_scale)
- `quantize_both(x, granularity, backend, amax_reduce)` -> (q, inv_q, qt, inv_qt)
- `scaled_mm(a, b, scale_a, scale_b, out_dtype, use_fast_accum, backend)` -> out

Quantize backends: "reference" (eager PyTorch, reference.py; torch.compile fuses it) and "triton"
(quantize_e4m3.py). GEMM backends: "emulated" (reference.scaled_mm: dequantize and matmul in fp32;
runs anywhere, same rounding of the inputs as the real thing), "torch" (torch._scaled_mm: cuBLAS,
sm_89+), "triton" (gemm_fp8_sm90.py, sm_90+). Triton modules are imported on first use, so the
package works without triton installed.

Layouts: "row" quantizes x (M, K) as is (rowwise: one scale per row, inv_scale (M, 1)); "col_t"
returns x^T (K, M) contiguous, scaled per column of x (inv_scale (K, 1)). Tensorwise scales are 0-dim.
`amax_reduce(amax) -> amax`, when given, runs between the amax and the scale computation: tensor
parallelism uses it to all-reduce (max) the amax of sharded scaling groups, so that scales equal those
of the unsharded tensor.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch.utils import _python_dispatch

from kernels.fp8 import reference

GRANULARITIES = ("tensorwise", "rowwise")
QUANTIZE_BACKENDS = ("reference", "triton")
GEMM_BACKENDS = ("emulated", "torch", "triton", "thunderkittens")

AmaxReduce = Callable[[torch.Tensor], torch.Tensor]


_TRITON_OPS: tuple | None = None


def _triton_ops():
    """(quantize_e4m3, gemm_fp8_sm90), imported on first use and then a global read (this runs on
    every call, where an import statement alone costs ~1 us)."""
    global _TRITON_OPS
    if _TRITON_OPS is None:
        try:
            from kernels.fp8 import gemm_fp8_sm90, quantize_e4m3
        except ImportError as e:  # triton missing or too old for tensor descriptors
            raise ValueError(f"kernels/fp8: the 'triton' backend needs triton >= 3.4 ({e})") from e
        _TRITON_OPS = (quantize_e4m3, gemm_fp8_sm90)
    return _TRITON_OPS


def _pick(op, impl, dispatch_modes_see_it: bool = False):
    """The registered custom op while torch.compile traces (it needs the op's fake kernel); the plain
    function in eager, which skips the custom-op dispatch (~10-25 us of host time per call, as much as
    a whole small GEMM takes on the GPU). With `dispatch_modes_see_it`, also the op while a
    TorchDispatchMode is active: per-op selective AC in eager is one, and a plain kernel launch is
    invisible to it, so its policy could not keep the GEMM's output and backward re-ran the GEMM."""
    if torch.compiler.is_compiling():
        return op
    if dispatch_modes_see_it and _python_dispatch._get_current_dispatch_mode() is not None:
        return op
    return impl


def _check(granularity: str, backend: str) -> None:
    if granularity not in GRANULARITIES:
        raise ValueError(f"kernels/fp8: granularity {granularity!r} is not one of {GRANULARITIES}")
    if backend not in QUANTIZE_BACKENDS:
        raise ValueError(f"kernels/fp8: quantize backend {backend!r} is not one of {QUANTIZE_BACKENDS}")


def quantize(
    x: torch.Tensor,
    granularity: str,
    layout: str = "row",
    backend: str = "reference",
    amax_reduce: AmaxReduce | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize 2-D x to e4m3 with dynamic scales; see the module docstring for layouts."""
    _check(granularity, backend)
    if layout not in ("row", "col_t"):
        raise ValueError(f"kernels/fp8: layout {layout!r} is not 'row' or 'col_t'")
    if granularity == "tensorwise":
        q, inv_q, qt, inv_qt = _tensorwise(x, layout == "row", layout == "col_t", backend, amax_reduce)
        return (q, inv_q) if layout == "row" else (qt, inv_qt)
    if backend == "reference":
        src = x if layout == "row" else x.t()
        amax = reference.finite_amax(src, dim=1)
        if amax_reduce is not None:
            amax = amax_reduce(amax)
        q, inv = reference.quantize_with_amax(src, amax)
        return q.contiguous(), inv
    qops, _ = _triton_ops()
    if layout == "row":
        op = _pick(qops.fp8_quantize_rowwise, qops.quantize_rowwise_impl)
    else:
        op = _pick(qops.fp8_quantize_colwise_t, qops.quantize_colwise_t_impl)
    amax = None
    if amax_reduce is not None:
        amax = amax_reduce(_pick(qops.fp8_amax, qops.amax_impl)(x, "row" if layout == "row" else "col"))
    return op(x, amax)


def quantize_both(
    x: torch.Tensor, granularity: str, backend: str = "reference", amax_reduce: AmaxReduce | None = None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """(q, inv_q) in layout "row" and (qt, inv_qt) in layout "col_t"; tensorwise writes both from
    one amax and (triton) one read of x, rowwise needs two different sets of scales."""
    _check(granularity, backend)
    if granularity == "tensorwise":
        return _tensorwise(x, True, True, backend, amax_reduce)
    q, inv_q = quantize(x, granularity, "row", backend, amax_reduce)
    qt, inv_qt = quantize(x, granularity, "col_t", backend, amax_reduce)
    return q, inv_q, qt, inv_qt


def _tensorwise(x, want_q: bool, want_t: bool, backend: str, amax_reduce):
    if backend == "reference":
        amax = reference.finite_amax(x)
        if amax_reduce is not None:
            amax = amax_reduce(amax)
        q, inv = reference.quantize_with_amax(x, amax)
        return q, inv, (q.t().contiguous() if want_t else None), inv
    qops, _ = _triton_ops()
    amax = None if amax_reduce is None else amax_reduce(_pick(qops.fp8_amax, qops.amax_impl)(x, "tensor"))
    q, qt, inv = _pick(qops.fp8_quantize_tensorwise, qops.quantize_tensorwise_impl)(x, amax, want_q, want_t)
    return q, inv, qt, inv


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    use_fast_accum: bool = False,
    backend: str = "emulated",
) -> torch.Tensor:
    """out (M, N) = (a * scale_a) @ (b * scale_b): a (M, K) row-major e4m3, b (K, N) column-major,
    scales rowwise ((M, 1), (1, N)) or tensorwise (one element each)."""
    if backend == "emulated":
        return reference.scaled_mm(a, b, scale_a, scale_b, out_dtype)
    if backend == "torch":
        rowwise = scale_a.numel() > 1 or scale_b.numel() > 1
        # cuBLAS rowwise scaling only writes bf16; other dtypes are cast afterwards.
        mm_dtype = torch.bfloat16 if rowwise else out_dtype
        out = torch._scaled_mm(a, b, scale_a, scale_b, out_dtype=mm_dtype, use_fast_accum=use_fast_accum)
        return out.to(out_dtype)
    if backend == "triton":
        _, gops = _triton_ops()
        # The kernel writes bf16 or fp32; other dtypes (fp16) are cast from fp32.
        mm_dtype = out_dtype if out_dtype in (torch.bfloat16, torch.float32) else torch.float32
        gemm = _pick(gops.fp8_gemm, gops.gemm_impl, dispatch_modes_see_it=True)
        out = gemm(a, b, scale_a, scale_b, mm_dtype, use_fast_accum)
        return out if mm_dtype == out_dtype else out.to(out_dtype)
    if backend == "thunderkittens":
        from kernels.thunderkittens import ops as tk_ops

        # Always fast accumulation (no fp32 promotion): see kernels/thunderkittens/README notes.
        return tk_ops.scaled_mm(a, b, scale_a, scale_b, out_dtype)
    raise ValueError(f"kernels/fp8: GEMM backend {backend!r} is not one of {GEMM_BACKENDS}")
