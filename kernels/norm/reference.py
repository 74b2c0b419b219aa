"""Eager RMSNorm in float32: the spec every other backend is tested against.

RMSNorm (Zhang and Sennrich, 2019, arXiv:1910.07467) as used by Llama:
    y = x / sqrt(mean(x^2 over the last dim) + eps) * weight
Everything is computed in float32 and the result is cast back to x's dtype, so a bf16 model gets
the same numbers as an fp32 one up to the final rounding. The backward is autograd of this formula.
"""

from __future__ import annotations

import torch


def rms_norm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """x (..., N), weight (N,) -> y (..., N) in x.dtype, computed in float32."""
    xf = x.float()
    rstd = torch.rsqrt(xf.pow(2).mean(dim=-1, keepdim=True) + eps)  # (..., 1)
    return (xf * rstd * weight.float()).to(x.dtype)
