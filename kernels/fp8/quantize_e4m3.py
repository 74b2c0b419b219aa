"""Triton kernels: dynamic e4m3 quantization (rowwise, colwise-transposed, tensorwise) as custom ops.

Bit-exact with kernels/fp8/reference.py (same fp32 amax, IEEE division for the scales, clamp,
round-to-nearest-even). Kernels:

- `_rowwise_kernel`: one program per BLOCK_M rows; pass 1 over the row computes amax, pass 2 (from L2)
  quantizes. MODE 0 = both (the fused one-launch path), 1 = amax only, 2 = quantize with a given
  amax (after an all-reduce under tensor parallelism).
- `_amax_tiles_kernel` + `_quantize_tiles_kernel`: 2-D tiles, for per-column and tensorwise scales.
  A column (or the whole tensor) spans many tiles, so its amax is a separate, fully parallel pass;
  the quantize pass then writes q (M, K) and/or the transposed qt (K, M) in one read of x, which is
  what the backward GEMMs need (K-major operands).

Why the explicit rounding in `_encode_e4m3`: Triton's interpreter (triton 3.9,
runtime/interpreter.py `_convert_float`) truncates fp32 -> fp8 casts, drops the mantissa carry and
maps NaN to 384, so a plain `.to(tl.float8e4nv)` cannot be tested on CPU. We round to the e4m3 grid
in fp32 first (a few integer ops in a memory-bound kernel) so the cast only ever sees representable
values, and write NaN as the 0x7F bit pattern. On GPU the cast is then exact too.
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl

from kernels.fp8.reference import E4M3

INTERPRET = os.environ.get("TRITON_INTERPRET", "0") == "1"
_IN_DTYPES = (torch.bfloat16, torch.float16, torch.float32)


@triton.jit
def _finite_abs(x):
    a = tl.abs(x)
    return tl.where(a < float("inf"), a, 0.0)  # NaN and inf do not set the scale


@triton.jit
def _scales(amax):
    """(scale, inv_scale) with IEEE division (plain `/` is div.full.f32, ~2 ulp, on NVIDIA)."""
    amax = tl.maximum(amax, 1e-12)
    scale = tl.math.div_rn(tl.zeros_like(amax) + 448.0, amax)
    inv = tl.math.div_rn(tl.zeros_like(scale) + 1.0, scale)
    return scale, inv


@triton.jit
def _encode_e4m3(x, scale):
    """x fp32 tile * scale -> e4m3 bit patterns (uint8); non-finite x -> NaN (0x7F)."""
    finite = tl.abs(x) < float("inf")
    y = tl.minimum(tl.maximum(x * scale, -448.0), 448.0)
    y = tl.where(finite, y, 0.0)
    bits = y.to(tl.int32, bitcast=True)
    # Normal e4m3 range (|y| >= 2^-6): round the fp32 mantissa to 3 bits, to nearest even; the carry
    # may ripple into the exponent, which is the correct result (e.g. 7.9375 -> 8).
    lsb = (bits >> 20) & 1
    normal = ((bits + 0x7FFFF + lsb) & -1048576).to(tl.float32, bitcast=True)
    # Subnormal range: e4m3 spacing is 2^-9; adding 1.5 * 2^14 (whose fp32 ulp is 2^-9) rounds there.
    mag = (tl.abs(y) + 24576.0) - 24576.0  # >= +0.0
    # Put y's sign bit back with an integer OR, so a negative y that rounds to zero gives -0.0 (0x80),
    # as torch's cast does. Not `-mag`: triton <= 3.6 compiles float negation as 0.0 - x, which
    # turns -(+0.0) into +0.0 (fixed upstream in triton PR 10270, 2026-05).
    sign = bits & -2147483648  # 0x80000000 as an int32
    sub = (mag.to(tl.int32, bitcast=True) | sign).to(tl.float32, bitcast=True)
    r = tl.where(tl.abs(y) < 0.015625, sub, normal)
    q = r.to(tl.float8e4nv).to(tl.uint8, bitcast=True)
    return tl.where(finite, q, 0x7F)


@triton.jit
def _rowwise_kernel(x_ptr, q_ptr, inv_ptr, amax_ptr, M, K,
                    MODE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    rmask = rows < M
    base = rows.to(tl.int64)[:, None] * K
    if MODE == 2:
        amax = tl.load(amax_ptr + rows, mask=rmask, other=0.0)
    else:
        amax = tl.zeros([BLOCK_M], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            m = rmask[:, None] & (cols[None, :] < K)
            x = tl.load(x_ptr + base + cols[None, :], mask=m, other=0.0).to(tl.float32)
            amax = tl.maximum(amax, tl.max(_finite_abs(x), axis=1))
    if MODE == 1:
        tl.store(amax_ptr + rows, amax, mask=rmask)
    else:
        scale, inv = _scales(amax)
        for k0 in range(0, K, BLOCK_K):
            cols = k0 + tl.arange(0, BLOCK_K)
            m = rmask[:, None] & (cols[None, :] < K)
            x = tl.load(x_ptr + base + cols[None, :], mask=m, other=0.0).to(tl.float32)
            tl.store(q_ptr + base + cols[None, :], _encode_e4m3(x, scale[:, None]), mask=m)
        tl.store(inv_ptr + rows, inv, mask=rmask)


@triton.jit
def _amax_tiles_kernel(x_ptr, out_ptr, M, K, COLWISE: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Per-tile partial amax: COLWISE -> out (cdiv(M, BLOCK_M), K), else out (num tiles,)."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    m = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=m, other=0.0)
    a = _finite_abs(x.to(tl.float32))
    if COLWISE:
        tl.store(out_ptr + pid_m.to(tl.int64) * K + cols, tl.max(a, axis=0), mask=cols < K)
    else:
        tl.store(out_ptr + pid_m * tl.num_programs(1) + pid_k, tl.max(a))


@triton.jit
def _quantize_tiles_kernel(x_ptr, q_ptr, qt_ptr, amax_ptr, inv_ptr, M, K,
                           COLWISE: tl.constexpr, WRITE_Q: tl.constexpr, WRITE_T: tl.constexpr,
                           BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr):
    """Quantize one (BLOCK_M, BLOCK_K) tile with per-column (COLWISE) or one global amax; write q
    (M, K) and/or qt (K, M). Programs of the first tile row/the first tile store inv_scale."""
    pid_m = tl.program_id(0)
    pid_k = tl.program_id(1)
    rows = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
    cols = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    m = (rows[:, None] < M) & (cols[None, :] < K)
    x = tl.load(x_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], mask=m, other=0.0)
    x = x.to(tl.float32)
    if COLWISE:
        scale, inv = _scales(tl.load(amax_ptr + cols, mask=cols < K, other=0.0))
        q = _encode_e4m3(x, scale[None, :])
        if pid_m == 0:
            tl.store(inv_ptr + cols, inv, mask=cols < K)
    else:
        scale, inv = _scales(tl.load(amax_ptr))
        q = _encode_e4m3(x, scale)
        if (pid_m == 0) & (pid_k == 0):
            tl.store(inv_ptr, inv)
    if WRITE_Q:
        tl.store(q_ptr + rows.to(tl.int64)[:, None] * K + cols[None, :], q, mask=m)
    if WRITE_T:
        qt_offs = cols.to(tl.int64)[:, None] * M + rows[None, :]
        tl.store(qt_ptr + qt_offs, tl.trans(q), mask=tl.trans(m))


# Block sizes: large tiles on GPU; small ones in the interpreter so that small test shapes still
# cross several blocks and the masked edges.
if INTERPRET:
    _ROW_BLOCKS, _TILE_BLOCKS, _WARPS = (4, 32), (16, 32), 4
else:
    _ROW_BLOCKS, _TILE_BLOCKS, _WARPS = (4, 1024), (64, 128), 4


def _prep(x: torch.Tensor, what: str) -> torch.Tensor:
    if x.dim() != 2 or x.numel() == 0:
        raise ValueError(f"titankit::{what}: x must be a non-empty 2-D tensor, got {tuple(x.shape)}")
    if x.dtype not in _IN_DTYPES:
        raise ValueError(f"titankit::{what}: x dtype {x.dtype} is not one of {_IN_DTYPES}")
    return x.contiguous()


def _prep_amax(amax: torch.Tensor, numel: int, what: str) -> torch.Tensor:
    if amax.numel() != numel or amax.dtype != torch.float32:
        raise ValueError(f"titankit::{what}: amax must be float32 with {numel} elements, got "
                         f"{amax.dtype} {tuple(amax.shape)}")
    return amax.contiguous()


def _tiles_amax(x: torch.Tensor, colwise: bool) -> torch.Tensor:
    M, K = x.shape
    bm, bk = _TILE_BLOCKS
    grid = (triton.cdiv(M, bm), triton.cdiv(K, bk))
    shape = (grid[0], K) if colwise else (grid[0] * grid[1],)
    part = torch.empty(shape, device=x.device, dtype=torch.float32)
    _amax_tiles_kernel[grid](x, part, M, K, COLWISE=colwise, BLOCK_M=bm, BLOCK_K=bk, num_warps=_WARPS)
    return part.amax(dim=0).reshape(K, 1) if colwise else part.amax()


def _rowwise(x: torch.Tensor, amax: torch.Tensor | None, mode: int):
    M, K = x.shape
    q = torch.empty((M, K) if mode != 1 else (0,), device=x.device, dtype=E4M3)
    inv = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    if amax is None:
        amax = torch.empty((M, 1), device=x.device, dtype=torch.float32)
    bm, bk = _ROW_BLOCKS
    _rowwise_kernel[(triton.cdiv(M, bm),)](
        x, q.view(torch.uint8), inv, amax, M, K, MODE=mode, BLOCK_M=bm, BLOCK_K=bk, num_warps=_WARPS
    )
    return q, inv, amax


def _tiles_quantize(x, amax, colwise: bool, write_q: bool, write_t: bool):
    M, K = x.shape
    q = torch.empty((M, K) if write_q else (0,), device=x.device, dtype=E4M3)
    qt = torch.empty((K, M) if write_t else (0,), device=x.device, dtype=E4M3)
    inv = torch.empty((K, 1) if colwise else (), device=x.device, dtype=torch.float32)
    bm, bk = _TILE_BLOCKS
    grid = (triton.cdiv(M, bm), triton.cdiv(K, bk))
    _quantize_tiles_kernel[grid](
        x, q.view(torch.uint8), qt.view(torch.uint8), amax, inv, M, K, COLWISE=colwise,
        WRITE_Q=write_q, WRITE_T=write_t, BLOCK_M=bm, BLOCK_K=bk, num_warps=_WARPS,
    )
    return q, qt, inv


def amax_impl(x: torch.Tensor, mode: str) -> torch.Tensor:
    """Finite amax in fp32: mode "row" -> (M, 1), "col" -> (K, 1) (per column of x), "tensor" -> ()."""
    x = _prep(x, "fp8_amax")
    if mode == "row":
        return _rowwise(x, None, mode=1)[2]
    if mode in ("col", "tensor"):
        return _tiles_amax(x, colwise=mode == "col")
    raise ValueError(f"titankit::fp8_amax: mode {mode!r} is not one of 'row', 'col', 'tensor'")


fp8_amax = torch.library.custom_op("titankit::fp8_amax", mutates_args=())(
    amax_impl)


@fp8_amax.register_fake
def _(x, mode):
    shape = {"row": (x.shape[0], 1), "col": (x.shape[1], 1)}.get(mode, ())
    return x.new_empty(shape, dtype=torch.float32)


def quantize_rowwise_impl(
    x: torch.Tensor, amax: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> (q (M, K) e4m3, inv_scale (M, 1)); one fused launch when amax is not given."""
    x = _prep(x, "fp8_quantize_rowwise")
    if amax is not None:
        amax = _prep_amax(amax, x.shape[0], "fp8_quantize_rowwise")
    q, inv, _ = _rowwise(x, amax, mode=0 if amax is None else 2)
    return q, inv


fp8_quantize_rowwise = torch.library.custom_op("titankit::fp8_quantize_rowwise", mutates_args=())(
    quantize_rowwise_impl)


@fp8_quantize_rowwise.register_fake
def _(x, amax=None):
    return x.new_empty(x.shape, dtype=E4M3), x.new_empty((x.shape[0], 1), dtype=torch.float32)


def quantize_colwise_t_impl(
    x: torch.Tensor, amax: torch.Tensor | None = None
) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> (qt (K, M) e4m3, inv_scale (K, 1)): per-column scales, transposed output."""
    x = _prep(x, "fp8_quantize_colwise_t")
    if amax is None:
        amax = _tiles_amax(x, colwise=True)
    else:
        amax = _prep_amax(amax, x.shape[1], "fp8_quantize_colwise_t")
    _, qt, inv = _tiles_quantize(x, amax, colwise=True, write_q=False, write_t=True)
    return qt, inv


fp8_quantize_colwise_t = torch.library.custom_op("titankit::fp8_quantize_colwise_t", mutates_args=())(
    quantize_colwise_t_impl)


@fp8_quantize_colwise_t.register_fake
def _(x, amax=None):
    M, K = x.shape
    return x.new_empty((K, M), dtype=E4M3), x.new_empty((K, 1), dtype=torch.float32)


def quantize_tensorwise_impl(
    x: torch.Tensor, amax: torch.Tensor | None = None, write_q: bool = True, write_t: bool = False
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """x (M, K) -> (q (M, K), qt (K, M), inv_scale ()); a layout not asked for comes back with shape
    (0,). Both layouts are written from one read of x (the backward needs both for grad_output)."""
    x = _prep(x, "fp8_quantize_tensorwise")
    if not (write_q or write_t):
        raise ValueError("titankit::fp8_quantize_tensorwise: ask for write_q and/or write_t")
    amax = _tiles_amax(x, colwise=False) if amax is None else _prep_amax(amax, 1, "fp8_quantize_tensorwise")
    return _tiles_quantize(x, amax.reshape(()), colwise=False, write_q=write_q, write_t=write_t)


fp8_quantize_tensorwise = torch.library.custom_op("titankit::fp8_quantize_tensorwise", mutates_args=())(
    quantize_tensorwise_impl)


@fp8_quantize_tensorwise.register_fake
def _(x, amax=None, write_q=True, write_t=False):
    M, K = x.shape
    q = x.new_empty((M, K) if write_q else (0,), dtype=E4M3)
    qt = x.new_empty((K, M) if write_t else (0,), dtype=E4M3)
    return q, qt, x.new_empty((), dtype=torch.float32)
