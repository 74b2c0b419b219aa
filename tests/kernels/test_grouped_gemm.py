"""Grouped GEMM backends (Triton, torch._grouped_mm) against the loop spec.

Random group sizes include empty groups (first, middle, last, all but one), K and N that are not
multiples of the tile sizes, and w given as a transposed view (how the MoE layer passes its
(G, N, K) parameters). Forward output and both gradients are checked against the float64 loop.
On CPU the Triton kernels run in the interpreter (fp32, fp16); with CUDA they run compiled, and
bf16 is added (torch._grouped_mm's fast path), with groups padded as the MoE layer pads them.
"""

import os

import torch

# Triton picks interpreter vs compiled when the kernels are decorated: set the flag first.
if not torch.cuda.is_available():
    os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402

pytest.importorskip("triton")

from kernels.moe import BACKENDS, grouped_mm, grouped_mm_reference, row_alignment  # noqa: E402

DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
# fp32: accumulation-order noise over K <= 100 terms. fp16/bf16: inputs are exact in the reference
# too, so only the output rounding (2^-11, 2^-8 relative) and fp32 accumulation order remain.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3),
       torch.bfloat16: dict(rtol=1.6e-2, atol=1.6e-2)}

# (group sizes, K, N)
CASES = [
    ([5, 0, 17, 3], 24, 40),
    ([0, 0, 9, 0], 16, 16),          # one non-empty group in the middle
    ([0, 33, 1, 0, 70], 37, 19),     # empty first and last groups, odd K and N
    ([1, 1, 1, 1, 1, 1, 1, 1], 8, 72),
    ([64, 65], 100, 33),             # groups spanning several M tiles
    ([0, 0, 0], 16, 8),              # no rows at all
]


@pytest.fixture(scope="module", autouse=True)
def interpreted_kernels():
    """If another test module imported the kernels without the interpreter, re-decorate them."""
    name = "kernels.moe.grouped_gemm_triton"
    if DEVICE == "cpu" and name in sys.modules:
        from triton.runtime.interpreter import InterpretedFunction

        if not isinstance(sys.modules[name]._grouped_mm_kernel, InterpretedFunction):
            importlib.reload(sys.modules[name])
    yield


def _inputs(sizes, k, n, dtype, seed, device="cpu"):
    g = torch.Generator().manual_seed(seed)
    m = sum(sizes)
    x = torch.randn(m, k, generator=g).to(device, dtype)
    # The parameter layout of the MoE layer: (G, N, K), used as its transposed view (G, K, N).
    w_param = (torch.randn(len(sizes), n, k, generator=g) / k**0.5).to(device, dtype)
    dy = torch.randn(m, n, generator=g).to(device, dtype)
    offs = torch.tensor(sizes, dtype=torch.int64).cumsum(0).to(device, torch.int32)
    return x, w_param, dy, offs


def _run(backend, x, w_param, dy, offs):
    x = x.clone().requires_grad_()
    w_param = w_param.clone().requires_grad_()
    out = grouped_mm(x, w_param.transpose(1, 2), offs, backend=backend)
    out.backward(dy)
    return out.detach(), x.grad, w_param.grad


# torch._grouped_mm on CPU is PyTorch's per-group fallback: fp32 checks its layout rules and autograd.
VARIANTS = [("triton", torch.float32), ("triton", torch.float16), ("torch", torch.float32)]
if DEVICE == "cuda":
    VARIANTS += [("triton", torch.bfloat16), ("torch", torch.bfloat16)]


@pytest.mark.parametrize("case", range(len(CASES)))
@pytest.mark.parametrize("backend,dtype", VARIANTS)
def test_matches_loop_reference(backend, dtype, case):
    sizes, k, n = CASES[case]
    per_row = 16 // torch.tensor([], dtype=dtype).element_size()
    if backend == "torch" and (k % per_row or n % per_row):
        # torch._grouped_mm needs 16-byte rows even on CPU: a clear error.
        x, w_param, _, offs = _inputs(sizes, k, n, dtype, seed=case, device=DEVICE)
        with pytest.raises(ValueError, match=f"multiples of {per_row}"):
            grouped_mm(x, w_param.transpose(1, 2), offs, backend="torch")
        return
    if backend == "torch" and DEVICE == "cuda":
        align = row_alignment("torch", torch.empty(0, dtype=dtype, device=DEVICE))
        sizes = [(s + align - 1) // align * align for s in sizes]  # as the MoE layer pads them
    x, w_param, dy, offs = _inputs(sizes, k, n, dtype, seed=case, device=DEVICE)
    want = _run("loop", x.double(), w_param.double(), dy.double(), offs)
    got = _run(backend, x, w_param, dy, offs)
    for name, g, r in zip(("out", "dx", "dw"), got, want):
        assert g.dtype == dtype and g.shape == r.shape, name
        torch.testing.assert_close(g.double(), r, **TOL[dtype], msg=lambda m: f"{backend} {name}: {m}")
    # Empty groups get exactly zero weight gradient.
    for gi, size in enumerate(sizes):
        if size == 0:
            assert torch.count_nonzero(got[2][gi]) == 0


def test_loop_reference_is_per_group_matmul():
    x, w_param, _, offs = _inputs([3, 0, 4], 8, 5, torch.float64, seed=0)
    out = grouped_mm_reference(x, w_param.transpose(1, 2), offs)
    torch.testing.assert_close(out[:3], x[:3] @ w_param[0].T)
    torch.testing.assert_close(out[3:], x[3:] @ w_param[2].T)


def test_bad_inputs_name_the_rule():
    x, w_param, _, offs = _inputs([3, 4], 8, 5, torch.float32, seed=0)
    with pytest.raises(ValueError, match="unknown backend"):
        grouped_mm(x, w_param.transpose(1, 2), offs, backend="cutlass")
    with pytest.raises(ValueError, match="int32"):
        grouped_mm(x, w_param.transpose(1, 2), offs.long(), backend="triton")
    with pytest.raises(ValueError, match="non-decreasing"):
        grouped_mm(x, w_param.transpose(1, 2), torch.tensor([5, 3], dtype=torch.int32), backend="loop")


def test_row_alignment():
    x = torch.randn(4, 8)
    assert all(row_alignment(b, x) == 1 for b in BACKENDS)  # CPU: no padding needed
    if DEVICE == "cuda":
        assert row_alignment("torch", x.to(DEVICE, torch.bfloat16)) == 8
