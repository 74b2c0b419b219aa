"""The TK attention backward in deterministic mode (torch.use_deterministic_algorithms: every fp32
accumulator block takes its adds in key-block order) against the default one, interleaved round by
round in one process, beside cuDNN (default mode) and our Triton kernel in deterministic mode (the
backend deterministic runs used before). Checks first that two deterministic calls agree bitwise.
Usage: python3 det_ab.py [rounds] [shape,...]"""
import statistics
import sys

import torch

from kernels.attention import attention as titankit_attention
from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn

SHAPES = {"anchor": (64, 8, 8192, True), "8b": (32, 8, 8192, True), "70b-tp8": (8, 1, 8192, True),
          "anchor-full": (64, 8, 8192, False), "anchor-16k": (64, 8, 16384, True)}
VARIANTS = ("tk", "tk-det", "cudnn", "triton-det")


def run(name, rounds, res):
    hq, hkv, s, causal = SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                   for h in (hq, hkv, hkv, hq))
    flops = 4.0 * hq * s * s * 128 / (2 if causal else 1)
    o, lse = ops.attention_fwd(q, k, v, causal=causal)
    bwd = lambda: ops.attention_bwd(do, q, k, v, o, lse, causal=causal)  # noqa: E731
    fast = [bwd(), bwd()]
    torch.use_deterministic_algorithms(True)
    det = [bwd(), bwd()]
    torch.use_deterministic_algorithms(False)
    print(name, "bitwise equal, two calls (dq, dk, dv): default",
          [torch.equal(a, b) for a, b in zip(*fast)], "deterministic",
          [torch.equal(a, b) for a, b in zip(*det)], "max abs diff default vs deterministic",
          [f"{(a.float() - b.float()).abs().max().item():.1e}" for a, b in zip(fast[0], det[0])],
          flush=True)
    del fast, det
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    fns = {"tk": lambda *a: ops.attention(*a, causal=causal),
           "tk-det": lambda *a: ops.attention(*a, causal=causal),
           "cudnn": lambda *a: cudnn(*a, causal),
           "triton-det": lambda *a: titankit_attention(*a, causal=causal, backend="triton")}
    for _ in range(rounds):
        for var in VARIANTS:
            torch.use_deterministic_algorithms(var.endswith("-det"))
            try:
                b = bench(bwd) if var.startswith("tk") else float("nan")
                fb = bench(lambda: torch.autograd.grad(fns[var](*leaves), leaves, do))
            finally:
                torch.use_deterministic_algorithms(False)
            res.setdefault((name, var), []).append((2.5 * flops / b / 1e9, 3.5 * flops / fb / 1e9))
    del q, k, v, do, leaves, o, lse
    torch.cuda.empty_cache()


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SHAPES)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    res = {}
    for name in names:
        run(name, rounds, res)
    print("\n| shape | variant | backward alone TFLOP/s (rounds; median) | forward+backward TFLOP/s "
          "(rounds; median) |\n|---|---|---|---|")
    for (name, var), vals in res.items():
        cols = []
        for i in (0, 1):
            xs = [x[i] for x in vals]
            cols.append("-" if xs[0] != xs[0] else
                        ", ".join(f"{x:.0f}" for x in xs) + f"; {statistics.median(xs):.0f}")
        print(f"| {name} | {var} | {cols[0]} | {cols[1]} |")


if __name__ == "__main__":
    main()
