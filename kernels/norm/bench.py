"""`python -m kernels.bench rmsnorm`: RMSNorm forward and forward+backward, Triton vs torch vs compile.

For each row width it times (triton.testing.do_bench, L2 flushed between runs, median ms):
  triton        - the fused custom op `titankit::rms_norm` (this package)
  torch         - backend "torch": F.rms_norm on the fp32 upcast, cast back (what the model uses)
  torch_native  - F.rms_norm directly in the input dtype (PyTorch's own kernel)
  compile       - torch.compile of the fp32 formula (Inductor's fused Triton kernel)
and prints GB/s from the bytes that must move: forward reads x and writes y (2 x M x N elements),
forward+backward adds reading x and dy and writing dx (5 x M x N); weight traffic is negligible.
"""

from __future__ import annotations

import argparse
import time
from typing import Callable

import torch
import torch.nn.functional as F

from kernels.norm import rms_norm, rms_norm_reference

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
VARIANTS = ("triton", "torch", "torch_native", "compile")
HEADER = f"{'N':>6} {'variant':>13} {'fwd ms':>8} {'fwd GB/s':>9} {'fwd+bwd ms':>11} {'f+b GB/s':>9} {'max err':>9}"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kernels.bench rmsnorm", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=16384, help="rows M (tokens per micro-batch)")
    p.add_argument("--dims", type=str, default="2048,4096,8192,16384", help="row widths N, comma-separated")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--eps", type=float, default=1e-5)
    p.add_argument("--variants", type=str, default=",".join(VARIANTS), help="comma-separated subset of " + ",".join(VARIANTS))
    args = p.parse_args(argv)
    unknown = set(args.variants.split(",")) - set(VARIANTS)
    if unknown:
        p.error(f"unknown variants {sorted(unknown)}; valid: {', '.join(VARIANTS)}")
    return args


def _variant(name: str, eps: float) -> Callable:
    if name == "triton":
        return lambda x, w: rms_norm(x, w, eps, backend="triton")
    if name == "torch":
        return lambda x, w: rms_norm(x, w, eps, backend="torch")
    if name == "torch_native":
        return lambda x, w: F.rms_norm(x, (x.shape[-1],), w, eps)

    def formula(x, w):
        xf = x.float()
        return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)

    return torch.compile(formula)


def do_bench_ms(fn: Callable[[], object]) -> float:
    from triton.testing import do_bench

    return float(do_bench(fn, warmup=25, rep=100, return_mode="median"))


def wall_ms(fn: Callable[[], object]) -> float:
    """Plain wall clock of one call (CPU smoke runs)."""
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def bench_width(
    m: int, n: int, dtype: torch.dtype, eps: float, variants: list[str], device: str, timer: Callable
) -> list[str]:
    """One table row per variant for x (m, n): forward, forward+backward, max error vs the spec."""
    g = torch.Generator(device=device).manual_seed(n)
    x = torch.randn(m, n, device=device, dtype=dtype, generator=g)
    w = (torch.randn(n, device=device, generator=g) * 0.1 + 1.0).to(dtype)
    dy = torch.randn(m, n, device=device, dtype=dtype, generator=g)
    ref = rms_norm_reference(x[:256], w, eps).float()
    elt = torch.finfo(dtype).bits // 8
    lines = []
    for name in variants:
        fn = _variant(name, eps)
        err = (fn(x[:256], w).float() - ref).abs().max().item()
        fwd = timer(lambda: fn(x, w))
        xg, wg = x.clone().requires_grad_(True), w.clone().requires_grad_(True)

        def fwd_bwd():
            xg.grad = wg.grad = None
            fn(xg, wg).backward(dy)

        both = timer(fwd_bwd)
        gbs_f = 2 * m * n * elt / fwd / 1e6
        gbs_b = 5 * m * n * elt / both / 1e6
        lines.append(f"{n:>6} {name:>13} {fwd:>8.3f} {gbs_f:>9.0f} {both:>11.3f} {gbs_b:>9.0f} {err:>9.2e}")
    return lines


def main(argv: list[str]) -> int:
    args = _parse(argv)
    if not torch.cuda.is_available():
        print("kernels.norm bench: needs CUDA (no GPU visible); nothing to measure on CPU")
        # Status 2, not 0: a run that measured nothing must not pass for a finished benchmark
        # in a script or a sweep that checks the exit status.
        return 2
    dtype = DTYPES[args.dtype]
    variants = args.variants.split(",")
    print(f"RMSNorm on {torch.cuda.get_device_name()}, rows={args.rows}, dtype={args.dtype}, eps={args.eps}")
    print(HEADER)
    for n in (int(d) for d in args.dims.split(",") if d):
        for line in bench_width(args.rows, n, dtype, args.eps, variants, "cuda", do_bench_ms):
            print(line, flush=True)
    return 0
