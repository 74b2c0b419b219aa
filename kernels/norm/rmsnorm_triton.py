"""Fused RMSNorm forward and backward in Triton (one row per program, fp32 accumulation).

Rows of up to MAX_ROW (16384) elements are held whole in registers, so the forward reads x once and
writes y once, and the backward recomputes 1/rms from x (no saved statistics) while reading x and dy
once. The weight gradient is reduced in two stages: each backward program accumulates its rows into
one fp32 partial row, and the (programs, N) partials are summed by torch afterwards.

Importing this module decorates the kernels, so TRITON_INTERPRET=1 must be set before the first
import when running on CPU (Triton reads it at decoration time).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl
from triton.runtime.interpreter import InterpretedFunction

from kernels import BackendUnavailable

MAX_ROW = 16384


@triton.jit
def _rms_norm_fwd_kernel(X, W, Y, N, eps, BLOCK_N: tl.constexpr):
    # One program per row of X (M, N), contiguous.
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(X + row * N + cols, mask=mask, other=0.0).to(tl.float32)
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    y = x * rstd * w
    tl.store(Y + row * N + cols, y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _rms_norm_bwd_kernel(DY, X, W, DX, DW_PARTIAL, M, N, eps, BLOCK_N: tl.constexpr):
    # Program p handles rows p, p + P, p + 2P, ... and writes its share of dW to DW_PARTIAL[p, :].
    # With xh = x * rstd:  dx = rstd * (dy * w - xh * mean(dy * w * xh)),  dw = sum_rows dy * xh.
    pid = tl.program_id(0)
    n_progs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
    dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    # 64-bit row offset once; then pointers advance by P rows per iteration (no int32 overflow).
    start = pid.to(tl.int64) * N
    X += start
    DY += start
    DX += start
    for _ in range(pid, M, n_progs):
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        dy = tl.load(DY + cols, mask=mask, other=0.0).to(tl.float32)
        rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
        xh = x * rstd
        dyw = dy * w
        c = tl.sum(dyw * xh, axis=0) / N
        dx = (dyw - xh * c) * rstd
        tl.store(DX + cols, dx.to(DX.dtype.element_ty), mask=mask)
        dw_acc += dy * xh
        X += n_progs * N
        DY += n_progs * N
        DX += n_progs * N
    tl.store(DW_PARTIAL + pid.to(tl.int64) * N + cols, dw_acc, mask=mask)


def _block_and_warps(n: int) -> tuple[int, int]:
    if n > MAX_ROW:
        raise ValueError(
            f"kernels.norm (triton backend): rows of {n} elements exceed the supported {MAX_ROW}; "
            "use backend='torch' for wider rows"
        )
    block = triton.next_power_of_2(n)
    # More warps for wider rows keep the per-thread register footprint of the whole row small.
    warps = 4 if block < 2048 else 8 if block < 8192 else 16
    return block, warps


def _check_device(x: torch.Tensor) -> None:
    # The kernels run on CPU tensors only when they were decorated under the interpreter.
    if x.device.type != "cuda" and not isinstance(_rms_norm_fwd_kernel, InterpretedFunction):
        raise BackendUnavailable(
            f"kernels.norm (triton backend): tensor on {x.device} needs CUDA, or TRITON_INTERPRET=1 "
            "set before triton is imported (CPU interpreter, for tests); use backend='torch' on CPU"
        )


def rms_norm_fwd(x2d: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x2d (M, N) contiguous, weight (N,) contiguous -> y (M, N) in x2d.dtype."""
    _check_device(x2d)
    m, n = x2d.shape
    block, warps = _block_and_warps(n)
    y = torch.empty_like(x2d)
    if m > 0:
        _rms_norm_fwd_kernel[(m,)](x2d, weight, y, n, eps, BLOCK_N=block, num_warps=warps)
    return y


def _num_bwd_programs(x: torch.Tensor, m: int) -> int:
    if x.device.type == "cuda":
        sms = torch.cuda.get_device_properties(x.device).multi_processor_count
        return max(1, min(m, 2 * sms))
    return max(1, min(m, 4))  # interpreter: a few programs still exercise the partial reduction


def rms_norm_bwd(
    dy2d: torch.Tensor, x2d: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """dy2d, x2d (M, N) contiguous, weight (N,) -> (dx (M, N) in x.dtype, dw (N,) in weight.dtype)."""
    _check_device(x2d)
    m, n = x2d.shape
    block, warps = _block_and_warps(n)
    dx = torch.empty_like(x2d)
    if m == 0:
        return dx, torch.zeros_like(weight)
    progs = _num_bwd_programs(x2d, m)
    partial = torch.empty((progs, n), dtype=torch.float32, device=x2d.device)
    _rms_norm_bwd_kernel[(progs,)](dy2d, x2d, weight, dx, partial, m, n, eps, BLOCK_N=block, num_warps=warps)
    return dx, partial.sum(dim=0).to(weight.dtype)
