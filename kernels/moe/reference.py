"""The spec of the grouped GEMM: one matmul per group, in a Python loop.

Layout (the contract of every backend in kernels/moe):
    x     (M, K)     rows sorted by group: group g owns rows offs[g-1] .. offs[g]-1 (offs[-1] = 0)
    w     (G, K, N)  one (K, N) matrix per group; any strides (a transposed view of a (G, N, K)
                     parameter is the usual case)
    offs  (G,)       int32, cumulative group ends, non-decreasing; a group may be empty
    out   (M, N)     out[rows of g] = x[rows of g] @ w[g]; rows past offs[-1] are zero here and
                     undefined in the fast backends, so callers keep offs[-1] == M.
Differentiable through ordinary autograd (slices and matmuls); it syncs the host once per call to
read the offsets, which is why it is only the reference.
"""

from __future__ import annotations

import torch


def grouped_mm_reference(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x (M, K), w (G, K, N), offs (G,) int32 -> (M, N) in x.dtype, one matmul per group."""
    ends = offs.tolist()
    if len(ends) != w.shape[0]:
        raise ValueError(f"grouped_mm_reference: offs has {len(ends)} groups but w has {w.shape[0]}")
    pieces, start = [], 0
    for g, end in enumerate(ends):
        if end < start or end > x.shape[0]:
            raise ValueError(
                f"grouped_mm_reference: offs must be non-decreasing and <= x.shape[0] = {x.shape[0]}; "
                f"got {ends}"
            )
        pieces.append(x[start:end] @ w[g])
        start = end
    if start < x.shape[0]:
        pieces.append(x.new_zeros(x.shape[0] - start, w.shape[2]))
    if not pieces:
        return x.new_zeros(x.shape[0], w.shape[2])
    return torch.cat(pieces, dim=0)
