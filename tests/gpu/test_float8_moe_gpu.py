"""FP8 MoE grouped GEMMs on CUDA: the real paths (torch._scaled_grouped_mm, per-expert
torch._scaled_mm) against the emulation of the same recipe, which tests/unit/test_float8_moe.py
checks bit for bit against an independent reference on CPU.

Same quantized operands on both sides, so the only differences are the accumulation (fp32 in the
tensor cores, fast accumulation keeps ~13 mantissa bits on Hopper) and bf16 output rounding: a
relative (Frobenius) error of 1e-2 covers both with margin at these sizes; e4m3 itself (2^-4) would
show up as errors near 5e-2 if a path quantized differently.
"""

import pytest
import torch

from trainer.float8_moe import GEMMS, float8_grouped_mm, pick_cuda_gemm

pytestmark = pytest.mark.gpu

COUNTS = [256, 0, 512, 128, 0, 384, 16, 240]  # empty experts and ragged groups (multiples of 16)


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a.double() - b.double()).norm() / b.double().norm()).item()


def _problem(n: int = 1024, k: int = 2048, seed: int = 0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    m = sum(COUNTS)
    x = (torch.randn(m, k, generator=g, device="cuda") * 2).bfloat16()
    w = (torch.randn(len(COUNTS), n, k, generator=g, device="cuda") * 0.05).bfloat16()
    dy = torch.randn(m, n, generator=g, device="cuda").bfloat16()
    offs = torch.tensor(COUNTS, device="cuda").cumsum(0).to(torch.int32)
    return x, w, dy, offs


def _run(gemm: str, recipe: str, x, w, dy, offs):
    xi, wi = x.clone().requires_grad_(), w.clone().requires_grad_()
    out = float8_grouped_mm(xi, wi, offs, recipe=recipe, gemm=gemm)
    out.backward(dy)
    return out.detach(), xi.grad, wi.grad


@pytest.mark.parametrize("recipe", ["rowwise", "tensorwise"])
@pytest.mark.parametrize("gemm", [g for g in GEMMS if g != "emulated"])
def test_cuda_paths_match_the_emulation(gemm, recipe):
    if gemm == "grouped" and pick_cuda_gemm() != "grouped":
        pytest.skip("torch._scaled_grouped_mm is not available on this torch/GPU")
    x, w, dy, offs = _problem()
    want = _run("emulated", recipe, x, w, dy, offs)
    got = _run(gemm, recipe, x, w, dy, offs)
    for name, a, b in zip(("out", "dx", "dw"), got, want):
        assert torch.isfinite(a).all(), f"{gemm}/{recipe}: {name} has non-finite values"
        assert _rel(a, b) < 1e-2, f"{gemm}/{recipe}: {name} differs from the emulation by {_rel(a, b):.2e}"
    # Empty experts get exactly zero weight gradients.
    for e, c in enumerate(COUNTS):
        if c == 0:
            assert torch.count_nonzero(got[2][e]) == 0
