"""Attention forward and forward+backward TFLOP/s against sequence length and masking.

Question: does the TK forward lose time per CTA (prologue, epilogue, the K/V ring draining
between CTAs), which a persistent kernel would hide? If so, its TFLOP/s should grow with S (more
K/V tiles per CTA) faster than cuDNN's. Shapes: B 1, Hq 64, Hkv 8, D 128 (the ANCHORS shape at
S 8192), causal at S 4096, 8192, 16384, and full (non-causal) at S 8192.
Usage: python3 scaling.py [rounds]
"""
import sys
import time

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn


def tk(q, k, v, causal):
    return ops.attention(q, k, v, causal=causal)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    cases = [(4096, True), (8192, True), (16384, True), (8192, False)]
    rows = []
    for r in range(rounds):
        for s, causal in cases:
            g = torch.Generator(device="cuda").manual_seed(0)
            q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                           for h in (64, 8, 8, 64))
            flops = 4.0 * 64 * s * s * 128 / (2 if causal else 1)
            for name, fn in (("tk", tk), ("cudnn", cudnn)):
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                print(time.strftime("%H:%M:%S"), "start", s, causal, name, flush=True)
                with torch.no_grad():
                    f = bench(lambda: fn(q, k, v, causal))
                fb = bench(lambda: torch.autograd.grad(fn(*leaves, causal), leaves, do))
                rows.append((r, s, causal, name, f, flops / f / 1e9, fb, 3.5 * flops / fb / 1e9,
                             2.5 * flops / (fb - f) / 1e9))
                print(rows[-1], flush=True)
            del q, k, v, do
            torch.cuda.empty_cache()
    print("\n| round | S | causal | impl | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s | bwd TFLOP/s (difference) |")
    print("|---|---|---|---|---|---|---|---|---|")
    for r, s, c, n, f, ft, fb, fbt, bt in rows:
        print(f"| {r} | {s} | {c} | {n} | {f:.3f} | {ft:.0f} | {fb:.3f} | {fbt:.0f} | {bt:.0f} |")


if __name__ == "__main__":
    main()
