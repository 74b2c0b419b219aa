"""`titankit::rms_norm` and `titankit::rms_norm_backward`: the Triton RMSNorm as torch custom ops.

Registering the kernels as custom ops (with fake implementations for shape propagation and an
autograd formula) lets torch.compile treat them as opaque nodes instead of tracing into Triton's
launcher. The backward recomputes 1/rms from x, so only x and weight are saved for it.
The Triton module is imported on first call, so `import kernels.norm` never needs Triton.
"""

from __future__ import annotations

import torch


@torch.library.custom_op("titankit::rms_norm", mutates_args=())
def rms_norm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., N), weight (N,) -> y (..., N) in x.dtype (contiguous)."""
    from kernels.norm import rmsnorm_triton

    n = x.shape[-1]
    y = rmsnorm_triton.rms_norm_fwd(x.reshape(-1, n).contiguous(), weight.contiguous(), eps)
    return y.view(x.shape)


@rms_norm_triton.register_fake
def _rms_norm_fake(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    return x.new_empty(x.shape)


@torch.library.custom_op("titankit::rms_norm_backward", mutates_args=())
def rms_norm_triton_backward(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """dy, x (..., N), weight (N,) -> (dx (..., N) in x.dtype, dw (N,) in weight.dtype)."""
    from kernels.norm import rmsnorm_triton

    n = x.shape[-1]
    dx, dw = rmsnorm_triton.rms_norm_bwd(
        dy.reshape(-1, n).contiguous(), x.reshape(-1, n).contiguous(), weight.contiguous(), eps
    )
    return dx.view(x.shape), dw


@rms_norm_triton_backward.register_fake
def _rms_norm_backward_fake(
    dy: torch.Tensor, x: torch.Tensor, weight: torch.Tensor, eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    return x.new_empty(x.shape), weight.new_empty(weight.shape)


def _setup_context(ctx, inputs, output) -> None:
    x, weight, eps = inputs
    ctx.save_for_backward(x, weight)
    ctx.eps = eps


def _backward(ctx, dy: torch.Tensor):
    x, weight = ctx.saved_tensors
    dx, dw = rms_norm_triton_backward(dy, x, weight, ctx.eps)
    return dx, dw, None


rms_norm_triton.register_autograd(_backward, setup_context=_setup_context)
