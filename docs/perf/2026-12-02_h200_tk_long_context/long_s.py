"""TK attention against cuDNN at long sequences, Llama-3 8B heads (Hq 32, Hkv 8, D 128, causal, B 1):
forward, forward+backward and the backward alone (the difference), interleaved by round.
Usage: python3 long_s.py [rounds] [S,...]"""
import sys

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    lens = [int(x) for x in sys.argv[2].split(",")] if len(sys.argv) > 2 else [8192, 16384, 32768]
    impls = {"tk": lambda q, k, v: ops.attention(q, k, v, causal=True),
             "cudnn": lambda q, k, v: cudnn(q, k, v, causal=True)}
    rows = []
    for s in lens:
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                       for h in (32, 8, 8, 32))
        flops = 4.0 * 32 * s * s * 128 / 2
        for r in range(rounds):
            for name, fn in impls.items():
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                with torch.no_grad():
                    f = bench(lambda: fn(q, k, v))
                fb = bench(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
                rows.append((s, r, name, flops / f / 1e9, 3.5 * flops / fb / 1e9,
                             2.5 * flops / (fb - f) / 1e9))
                print(rows[-1], flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()
    print("\n| S | round | impl | fwd TFLOP/s | fwd+bwd TFLOP/s | bwd alone TFLOP/s |")
    print("|---|---|---|---|---|---|")
    for s, r, n, ft, fbt, bt in rows:
        print(f"| {s} | {r} | {n} | {ft:.0f} | {fbt:.0f} | {bt:.0f} |")


if __name__ == "__main__":
    main()
