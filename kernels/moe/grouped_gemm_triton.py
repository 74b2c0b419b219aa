"""Triton grouped GEMM for mixture-of-experts layers (no host synchronisation).

Two kernels over the layout of reference.py (x (M, K) sorted by group, w (G, K, N), offs (G,)):

grouped_mm   out[rows of g] = x[rows of g] @ w[g]. The M dimension is cut into tiles group by group
             (a tile never straddles two groups), so the number of tiles is at most
             cdiv(M, BLOCK_M) + G: the grid has that many M-programs, each walks the G offsets to find
             its (group, first row), and the few surplus programs store nothing. Empty groups own
             no tile. Used for the forward (x @ w) and for dx = dy @ w^T (a transposed view of w).
grouped_dw   dw[g] = x[rows of g]^T @ dy[rows of g], one (BLOCK_K, BLOCK_N) tile of one group per
             program, looping over the group's rows; an empty group writes zeros.

Both accumulate in fp32 and take any strides, so no operand is copied to change its layout.
Under TRITON_INTERPRET=1 they run on CPU tensors (tests use fp32 and fp16: the interpreter's bf16
tl.dot is wrong on this stack, see NOTES.md).
"""

from __future__ import annotations

import os

import torch
import triton
import triton.language as tl


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def _find_tile(offs_ptr, G, pid_m, BLOCK_M: tl.constexpr):
    """(group, first row, group end) of M-tile `pid_m`; (0, 0, 0) for a surplus tile."""
    group = 0
    row0 = 0
    row_end = 0
    start = 0
    tiles = 0
    for g in range(0, G):
        end = tl.load(offs_ptr + g)
        n_tiles = (end - start + BLOCK_M - 1) // BLOCK_M
        hit = (pid_m >= tiles) & (pid_m < tiles + n_tiles)
        group = tl.where(hit, g, group)
        row0 = tl.where(hit, start + (pid_m - tiles) * BLOCK_M, row0)
        row_end = tl.where(hit, end, row_end)
        tiles += n_tiles
        start = end
    return group, row0, row_end


@triton.jit
def _grouped_mm_kernel(
    x_ptr, w_ptr, out_ptr, offs_ptr, G, N, K,
    s_xm, s_xk, s_wg, s_wk, s_wn, s_om, s_on,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):
    pid_m = tl.program_id(0)
    pid_n = tl.program_id(1)
    group, row0, row_end = _find_tile(offs_ptr, G, pid_m, BLOCK_M)
    rows = (row0 + tl.arange(0, BLOCK_M)).to(tl.int64)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    row_ok = rows < row_end
    col_ok = cols < N
    w_base = w_ptr + group.to(tl.int64) * s_wg
    acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        ks = k0 + tl.arange(0, BLOCK_K)
        k_ok = ks < K
        a = tl.load(x_ptr + rows[:, None] * s_xm + ks[None, :] * s_xk,
                    mask=row_ok[:, None] & k_ok[None, :], other=0.0)
        b = tl.load(w_base + ks[:, None] * s_wk + cols[None, :] * s_wn,
                    mask=k_ok[:, None] & col_ok[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    tl.store(out_ptr + rows[:, None] * s_om + cols[None, :] * s_on,
             acc.to(out_ptr.dtype.element_ty), mask=row_ok[:, None] & col_ok[None, :])


@triton.jit
def _grouped_dw_kernel(
    x_ptr, dy_ptr, dw_ptr, offs_ptr, K, N,
    s_xm, s_xk, s_dm, s_dn, s_wg, s_wk, s_wn,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, IEEE: tl.constexpr,
):
    group = tl.program_id(0)
    pid_k = tl.program_id(1)
    pid_n = tl.program_id(2)
    start = tl.where(group > 0, tl.load(offs_ptr + tl.maximum(group - 1, 0)), 0)
    end = tl.load(offs_ptr + group)
    ks = pid_k * BLOCK_K + tl.arange(0, BLOCK_K)
    cols = pid_n * BLOCK_N + tl.arange(0, BLOCK_N)
    k_ok = ks < K
    col_ok = cols < N
    acc = tl.zeros((BLOCK_K, BLOCK_N), dtype=tl.float32)
    for m0 in range(start, end, BLOCK_M):
        rows = (m0 + tl.arange(0, BLOCK_M)).to(tl.int64)
        row_ok = rows < end
        # x^T tile (BLOCK_K, BLOCK_M) read straight from x's strides.
        a = tl.load(x_ptr + rows[None, :] * s_xm + ks[:, None] * s_xk,
                    mask=k_ok[:, None] & row_ok[None, :], other=0.0)
        b = tl.load(dy_ptr + rows[:, None] * s_dm + cols[None, :] * s_dn,
                    mask=row_ok[:, None] & col_ok[None, :], other=0.0)
        if IEEE:
            acc = tl.dot(a, b, acc, input_precision="ieee")
        else:
            acc = tl.dot(a, b, acc)
    base = dw_ptr + group.to(tl.int64) * s_wg
    tl.store(base + ks[:, None] * s_wk + cols[None, :] * s_wn, acc.to(dw_ptr.dtype.element_ty),
             mask=k_ok[:, None] & col_ok[None, :])


def _blocks() -> tuple[int, int, int, int]:
    """(BLOCK_M, BLOCK_N, BLOCK_K, num_warps): small tiles for the CPU interpreter, larger on GPU
    (untuned: a starting point for bf16 on sm_90)."""
    if _interpreting():
        return 32, 32, 32, 4
    return 64, 128, 64, 4


def _check(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> None:
    if x.dim() != 2 or w.dim() != 3 or x.shape[1] != w.shape[1]:
        raise ValueError(
            f"grouped_mm: need x (M, K) and w (G, K, N); got {tuple(x.shape)} and {tuple(w.shape)}")
    if offs.dim() != 1 or offs.shape[0] != w.shape[0] or offs.dtype != torch.int32:
        raise ValueError(f"grouped_mm: offs must be int32 of shape (G,) = ({w.shape[0]},); got "
                         f"{offs.dtype} {tuple(offs.shape)}")
    if x.dtype != w.dtype:
        raise ValueError(f"grouped_mm: x ({x.dtype}) and w ({w.dtype}) must have the same dtype")


def grouped_mm_fwd(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x (M, K), w (G, K, N) any strides, offs (G,) int32 -> out (M, N) in x.dtype."""
    _check(x, w, offs)
    m, k = x.shape
    g, _, n = w.shape
    out = torch.empty((m, n), dtype=x.dtype, device=x.device)
    if m == 0 or n == 0 or g == 0:
        return out
    bm, bn, bk, warps = _blocks()
    grid = (triton.cdiv(m, bm) + g, triton.cdiv(n, bn))
    _grouped_mm_kernel[grid](
        x, w, out, offs, g, n, k,
        x.stride(0), x.stride(1), w.stride(0), w.stride(1), w.stride(2), out.stride(0), out.stride(1),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=x.dtype == torch.float32, num_warps=warps,
    )
    return out


def grouped_mm_dw(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x (M, K), dy (M, N), offs (G,) int32 -> dw (G, K, N) in x.dtype, dw[g] = x_g^T @ dy_g."""
    if x.dim() != 2 or dy.dim() != 2 or x.shape[0] != dy.shape[0]:
        raise ValueError(
            f"grouped_mm_dw: need x (M, K) and dy (M, N); got {tuple(x.shape)}, {tuple(dy.shape)}")
    m, k = x.shape
    n = dy.shape[1]
    g = offs.shape[0]
    dw = torch.empty((g, k, n), dtype=x.dtype, device=x.device)
    if g == 0 or k == 0 or n == 0:
        return dw
    bm, bn, bk, warps = _blocks()
    grid = (g, triton.cdiv(k, bk), triton.cdiv(n, bn))
    _grouped_dw_kernel[grid](
        x, dy, dw, offs, k, n,
        x.stride(0), x.stride(1), dy.stride(0), dy.stride(1), dw.stride(0), dw.stride(1), dw.stride(2),
        BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, IEEE=x.dtype == torch.float32, num_warps=warps,
    )
    return dw
