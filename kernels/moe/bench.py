"""`python -m kernels.moe.bench`: the grouped expert GEMM, loop vs torch._grouped_mm vs Triton.

One GEMM of an MoE layer, x (M, K) sorted by expert @ w (E, K, N) given as the transposed view of
a (E, N, K) parameter (as the layer calls it), with M = tokens x top_k rows split over E experts by
a multinomial draw (optionally skewed). For each backend it prints the median time
(triton.testing.do_bench) of the forward and of forward+backward, TFLOP/s (2MKN forward, 6MKN
both), and the max error of the forward against the fp32 loop. Groups are padded to the backend's
`row_alignment`, as the MoE layer does.
"""

from __future__ import annotations

import argparse

import torch

from kernels.moe import BACKENDS, grouped_mm, row_alignment

DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
HEADER = f"{'backend':>8} {'fwd ms':>8} {'fwd TF/s':>9} {'f+b ms':>8} {'f+b TF/s':>9} {'max err':>9}"


def _parse(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m kernels.moe.bench", description=__doc__.splitlines()[0])
    p.add_argument("--rows", type=int, default=49152, help="rows M = tokens x top_k (moe_16b: 8192 x 6)")
    p.add_argument("--experts", type=int, default=64)
    p.add_argument("--k", type=int, default=2048, help="contraction dim (model dim for w1/w3)")
    p.add_argument("--n", type=int, default=1408, help="output dim (expert hidden for w1/w3)")
    p.add_argument("--skew", type=float, default=0.0, help="0 = uniform routing; larger = more imbalance")
    p.add_argument("--dtype", choices=sorted(DTYPES), default="bfloat16")
    p.add_argument("--backends", type=str, default=",".join(BACKENDS))
    args = p.parse_args(argv)
    unknown = set(args.backends.split(",")) - set(BACKENDS)
    if unknown:
        p.error(f"unknown backends {sorted(unknown)}; valid: {', '.join(BACKENDS)}")
    return args


def group_sizes(rows: int, experts: int, skew: float, seed: int = 0) -> torch.Tensor:
    """Rows per expert (E,) summing to `rows`: a multinomial draw with probabilities ~ exp(-skew i / E)."""
    g = torch.Generator().manual_seed(seed)
    probs = torch.exp(-skew * torch.arange(experts, dtype=torch.float64) / experts)
    ids = torch.multinomial(probs / probs.sum(), rows, replacement=True, generator=g)
    return torch.bincount(ids, minlength=experts)


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv or [])
    if not torch.cuda.is_available():
        print("kernels.moe bench: needs CUDA (no GPU visible); nothing to measure on CPU")
        # Status 2, not 0: a run that measured nothing must not pass for a finished benchmark
        # in a script or a sweep that checks the exit status.
        return 2
    from triton.testing import do_bench

    dtype, dev = DTYPES[args.dtype], "cuda"
    sizes = group_sizes(args.rows, args.experts, args.skew)
    print(f"grouped GEMM on {torch.cuda.get_device_name()}: M={args.rows} K={args.k} N={args.n} "
          f"E={args.experts} {args.dtype}, rows per expert min {int(sizes.min())} max {int(sizes.max())}")
    print(HEADER)
    g = torch.Generator(device=dev).manual_seed(0)
    w_param = (torch.randn(args.experts, args.n, args.k, device=dev, generator=g) / args.k**0.5).to(dtype)
    for backend in args.backends.split(","):
        align = row_alignment(backend, w_param)
        padded = (sizes + align - 1) // align * align
        m = int(padded.sum())
        x = torch.randn(m, args.k, device=dev, generator=g).to(dtype)
        offs = padded.cumsum(0).to(dev, torch.int32)
        dy = torch.randn(m, args.n, device=dev, generator=g).to(dtype)
        w = w_param.transpose(1, 2)
        out = grouped_mm(x, w, offs, backend=backend).float()
        ref = grouped_mm(x.float(), w.float(), offs, backend="loop")
        err = (out - ref).abs().max().item()
        fwd = do_bench(lambda: grouped_mm(x, w, offs, backend=backend), return_mode="median")
        xg, wg = x.clone().requires_grad_(), w_param.clone().requires_grad_()

        def fwd_bwd():
            xg.grad = wg.grad = None
            grouped_mm(xg, wg.transpose(1, 2), offs, backend=backend).backward(dy)

        both = do_bench(fwd_bwd, return_mode="median")
        flops = 2 * args.rows * args.k * args.n  # useful rows only, not the padding
        print(f"{backend:>8} {fwd:>8.3f} {flops / fwd / 1e9:>9.1f} {both:>8.3f} "
              f"{3 * flops / both / 1e9:>9.1f} {err:>9.2e}", flush=True)
    return 0


if __name__ == "__main__":
    import sys

    sys.exit(main(sys.argv[1:]))
