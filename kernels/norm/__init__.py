"""RMSNorm: `rms_norm(x, weight, eps, backend)` with an eager and a fused Triton implementation.

Backends:
  "torch"  - the float32 formula through torch.nn.functional.rms_norm, cast back to x.dtype
             (differentiable by autograd; composes with DTensor and torch.compile).
  "triton" - the fused kernel of rmsnorm_triton.py as the custom op `titankit::rms_norm`
             (CUDA, or CPU under TRITON_INTERPRET=1 for tests); rows of up to 16384 elements;
             takes DTensors sharded on any dim but the last (sharding.py).
Both compute in float32 and match `reference.rms_norm_reference` (the spec).
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from kernels.norm import op as _op  # registers torch.ops.titankit.rms_norm*
from kernels.norm.reference import rms_norm_reference

if torch.distributed.is_available():
    from kernels.norm import sharding as _sharding  # noqa: F401  (DTensor rules for the Triton op)

BACKENDS = ("torch", "triton")

__all__ = ["BACKENDS", "rms_norm", "rms_norm_reference"]


def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float, backend: str = "torch") -> torch.Tensor:
    """x (..., N), weight (N,) -> x / sqrt(mean(x^2, -1) + eps) * weight, in x.dtype."""
    if weight.dim() != 1 or x.shape[-1] != weight.shape[0]:
        raise ValueError(
            f"kernels.norm.rms_norm: weight of shape {tuple(weight.shape)} does not match the last "
            f"dimension of x {tuple(x.shape)}; weight must be 1-D of size x.shape[-1]"
        )
    if backend == "torch":
        y = F.rms_norm(x.float(), (x.shape[-1],), weight.float(), eps)
        return y.to(x.dtype)
    if backend == "triton":
        return _op.rms_norm_triton(x, weight, eps)
    raise ValueError(f"kernels.norm.rms_norm: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
