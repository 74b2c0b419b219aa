"""A/B of forward builds picked per call by TK_FWD_QREG (bit 0: Q K^T with Q from registers instead
of shared memory; bit 1: O rescaled while the next Q K^T runs instead of after P V; bit 2: the softmax's max and sum
through four partials per row; the variants in AB_VARIANTS, default 0,1,2,3), interleaved round
by round, with cuDNN beside them; also checks that every variant gives bitwise the same output and
LSE as variant 0. Usage: python3 fwd_ab.py [rounds]"""
import os
import sys

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn

VARIANTS = tuple(os.environ.get("AB_VARIANTS", "0,1,2,3").split(","))
SHAPES = {"anchor": (64, 8, 8192, True), "8b": (32, 8, 8192, True), "70b-tp8": (8, 1, 8192, True),
          "anchor-full": (64, 8, 8192, False), "anchor-16k": (64, 8, 16384, True)}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    res = {}
    for name, (hq, hkv, s, causal) in SHAPES.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        flops = 4.0 * hq * s * s * 128 / (2 if causal else 1)
        outs = {}
        for var in VARIANTS:
            os.environ["TK_FWD_QREG"] = var
            outs[var] = ops.attention_fwd(q, k, v, causal=causal)
            same = all(torch.equal(a, b) for a, b in zip(outs["0"], outs[var]))
            diff = [(a.float() - b.float()).abs().max().item() for a, b in zip(outs["0"], outs[var])]
            print(name, "variant", var, "bitwise equal to 0 (out, lse):", same,
                  "max abs diff (out, lse):", diff, flush=True)
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        for r in range(rounds):
            for var in (*VARIANTS, "cudnn"):
                if var == "cudnn":
                    fn = lambda *a: cudnn(*a, causal)  # noqa: E731
                else:
                    os.environ["TK_FWD_QREG"] = var
                    fn = lambda *a: ops.attention(*a, causal=causal)  # noqa: E731
                with torch.no_grad():
                    f = bench(lambda: fn(q, k, v))
                fb = bench(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
                res.setdefault((name, var), []).append((flops / f / 1e9, 3.5 * flops / fb / 1e9))
        del q, k, v, do, leaves
        torch.cuda.empty_cache()
    print("\n| shape | variant | forward TFLOP/s by round | forward+backward TFLOP/s by round |")
    print("|---|---|---|---|")
    label = {"0": "main", "1": "Q from registers", "2": "rescale under Q K^T",
             "3": "Q from registers + rescale under Q K^T", "4": "short-chain softmax",
             "6": "short-chain softmax + rescale under Q K^T", "cudnn": "cuDNN"}
    for (name, var), v in res.items():
        print(f"| {name} | {label[var]} | {' '.join(f'{a:.0f}' for a, _ in v)} | "
              f"{' '.join(f'{b:.0f}' for _, b in v)} |")


if __name__ == "__main__":
    main()
