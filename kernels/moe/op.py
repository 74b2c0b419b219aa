"""Grouped GEMM ops with autograd: the Triton kernels as torch custom ops, and torch._grouped_mm.

`titankit::grouped_mm` (forward, and dx = dy @ w^T through a transposed view of w) and
`titankit::grouped_mm_dw` (dw[g] = x_g^T @ dy_g) are registered with fake implementations, so
torch.compile treats them as opaque nodes, and with an autograd formula. The Triton module is
imported on first call, so `import kernels.moe` never needs Triton.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("titankit::grouped_mm", mutates_args=())
def grouped_mm_triton(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x (M, K), w (G, K, N), offs (G,) int32 -> (M, N)."""
    from kernels.moe import grouped_gemm_triton

    return grouped_gemm_triton.grouped_mm_fwd(x, w, offs)


@grouped_mm_triton.register_fake
def _grouped_mm_fake(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x.new_empty((x.shape[0], w.shape[2]))


@torch.library.custom_op("titankit::grouped_mm_dw", mutates_args=())
def grouped_mm_dw_triton(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """x (M, K), dy (M, N), offs (G,) int32 -> dw (G, K, N)."""
    from kernels.moe import grouped_gemm_triton

    return grouped_gemm_triton.grouped_mm_dw(x, dy, offs)


@grouped_mm_dw_triton.register_fake
def _grouped_mm_dw_fake(x: torch.Tensor, dy: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    return x.new_empty((offs.shape[0], x.shape[1], dy.shape[1]))


def _setup_context(ctx, inputs, output) -> None:
    x, w, offs = inputs
    ctx.save_for_backward(x, w, offs)


def _backward(ctx, dy: torch.Tensor):
    x, w, offs = ctx.saved_tensors
    dy = dy.contiguous()
    dx = grouped_mm_triton(dy, w.transpose(1, 2), offs) if ctx.needs_input_grad[0] else None
    dw = grouped_mm_dw_triton(x, dy, offs) if ctx.needs_input_grad[1] else None
    return dx, dw, None


grouped_mm_triton.register_autograd(_backward, setup_context=_setup_context)


def grouped_mm_torch(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """torch._grouped_mm (CUTLASS on sm_90+ in bf16; a per-group loop elsewhere), differentiable."""
    out = torch._grouped_mm(x, w, offs=offs)
    if out.requires_grad:
        # Its backward rejects gradients with zero strides (e.g. from `out.sum()`).
        out.register_hook(torch.Tensor.contiguous)
    return out
