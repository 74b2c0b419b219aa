"""Eager PyTorch FP8 (e4m3) quantization and scaled GEMM: the spec the Triton kernels must match.

Dynamic scaling, as in torchao's float8 training and DeepSeek-V3 (arXiv 2412.19437):

    amax  = max |x| over the scaling group (fp32), non-finite values ignored
    scale = 448 / max(amax, AMAX_EPS)           (fp32, IEEE division)
    q     = e4m3(clamp(x * scale, -448, 448))   (round to nearest even)
    x    ~= q * inv_scale,  inv_scale = 1 / scale

A scaling group is the whole tensor ("tensorwise"), one row ("rowwise") or one column (the
"colwise" variant, returned transposed so that the backward GEMMs get the K-major layout they need).
The GEMMs take `inv_scale` (the dequantizing scale), like `torch._scaled_mm`.

Edge cases (scales are never inf or NaN):
- all-zero or tiny groups: amax is clamped to AMAX_EPS = 1e-12, so scale <= 4.48e14 (finite) and the
  data round to zero or to small e4m3 values; nothing below 1e-12 matters for training.
- huge groups (up to the fp32/bf16 maximum ~3.4e38): scale >= 1.3e-36 is a normal fp32 number and the
  largest element maps to exactly +-448 (saturated by the clamp, never to NaN).
- NaN and +-inf inputs: ignored when computing amax, so the other elements keep a meaningful scale;
  they are encoded as the e4m3 NaN (0x7F; e4m3fn has no inf), so the GEMM output is NaN where a
  bf16 matmul would be inf or NaN and a diverging run stays visible in the loss.
"""

from __future__ import annotations

import torch

E4M3 = torch.float8_e4m3fn
E4M3_MAX = 448.0
"""Largest finite float8_e4m3fn value."""
AMAX_EPS = 1e-12
"""Lower bound on amax: keeps scale = 448 / amax finite for all-zero and denormal groups."""


def finite_amax(x: torch.Tensor, dim: int | None = None) -> torch.Tensor:
    """max |x| in fp32 over `dim` (keepdim) or the whole tensor (0-dim), ignoring NaN and inf."""
    a = x.float().abs()
    a = torch.where(a < float("inf"), a, torch.zeros_like(a))  # NaN < inf is False too
    return a.amax() if dim is None else a.amax(dim=dim, keepdim=True)


def scales_from_amax(amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(scale, inv_scale) in fp32. True division on purpose: `448.0 / t` is computed by torch as
    t.reciprocal() * 448, which rounds differently from the kernels' IEEE division."""
    amax = amax.float().clamp(min=AMAX_EPS)
    scale = torch.full_like(amax, E4M3_MAX) / amax
    return scale, torch.ones_like(scale) / scale


def quantize_with_amax(x: torch.Tensor, amax: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Quantize x with a given amax (broadcastable to x): returns (q e4m3 like x, inv_scale)."""
    scale, inv = scales_from_amax(amax)
    xf = x.float()
    y = (xf * scale).clamp(-E4M3_MAX, E4M3_MAX)
    y = torch.where(xf.abs() < float("inf"), y, torch.full_like(y, float("nan")))
    return y.to(E4M3), inv


def quantize_rowwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> q (M, K) e4m3, inv_scale (M, 1) fp32: one scale per row."""
    _check_2d(x)
    return quantize_with_amax(x, finite_amax(x, dim=1))


def quantize_colwise_t(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (M, K) -> qt (K, M) contiguous e4m3, inv_scale (K, 1): one scale per column of x, stored
    transposed (the K-major operand of the backward GEMMs). Same as quantize_rowwise(x.t())."""
    _check_2d(x)
    q, inv = quantize_with_amax(x.t(), finite_amax(x.t(), dim=1))
    return q.contiguous(), inv


def quantize_tensorwise(x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """x (any shape) -> q like x, inv_scale 0-dim fp32: one scale for the whole tensor."""
    return quantize_with_amax(x, finite_amax(x))


def dequantize(q: torch.Tensor, inv_scale: torch.Tensor) -> torch.Tensor:
    """fp32 values q * inv_scale (inv_scale broadcast: (M, 1), (1, N) or 0-dim)."""
    return q.float() * inv_scale


def scaled_mm(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
) -> torch.Tensor:
    """out (M, N) = (a * scale_a) @ (b * scale_b) in fp32, cast to out_dtype.

    a (M, K) and b (K, N) e4m3 (any strides); scale_a (M, 1) and scale_b (1, N) (rowwise) or 0-dim /
    one-element (tensorwise), the dequantizing scales `torch._scaled_mm` takes.
    """
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"scaled_mm: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not multiply")
    return (dequantize(a, scale_a) @ dequantize(b, scale_b)).to(out_dtype)


def _check_2d(x: torch.Tensor) -> None:
    if x.dim() != 2:
        raise ValueError(f"kernels/fp8: expected a 2-D (M, K) tensor, got shape {tuple(x.shape)}")
