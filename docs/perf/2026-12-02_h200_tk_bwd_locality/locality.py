"""TK attention backward, default vs deterministic mode (whose CTAs walk query tiles from the last
one down with the heads inside), against cuDNN, at the anchor head layout (Hq 64, Hkv 8) and the
8B one (Hq 32, Hkv 8), S 8192 and 16384, causal, D 128, B 1. Interleaved by round, order rotated.
Usage: python3 locality.py [rounds] [shape,...] [impl,...]   shapes: hq:hkv:s[:full], e.g. 64:8:16384
impl: tk, tk-det, cudnn, tk-legacy (TK_BWD_LEGACY=1, only with ab_legacy.patch applied).
Until commit "locality.py: tk-det holds deterministic mode through the backward" (2026-12-02) the
tk-det column enabled deterministic mode around the forward call only; the backward op reads the
mode when it runs, so those tk-det rows (call 1 here, calls 1 and 6 of
docs/perf/2026-12-02_h200_tk_cooldown_bench/) timed the default backward twice."""
import os
import sys

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn
from kernels.thunderkittens.bench import deterministic_mode
from kernels.thunderkittens.bench import round_orders


def tk(legacy=False):
    def fn(q, k, v, causal):
        os.environ["TK_BWD_LEGACY"] = "1" if legacy else "0"
        return ops.attention(q, k, v, causal=causal)
    return fn


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    shapes = sys.argv[2] if len(sys.argv) > 2 else "64:8:8192,64:8:16384,32:8:16384"
    names = (sys.argv[3] if len(sys.argv) > 3 else "tk,tk-det,cudnn").split(",")
    every = {"tk": tk(), "tk-det": tk(), "tk-legacy": tk(legacy=True),
             "cudnn": lambda q, k, v, causal: cudnn(q, k, v, causal=causal)}
    impls = {n: every[n] for n in names}
    rows = []
    for shape in shapes.split(","):
        hq, hkv, s = (int(x) for x in shape.split(":")[:3])
        causal = not shape.endswith(":full")
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        flops = 4.0 * hq * s * s * 128 / (2 if causal else 1)
        for r, order in enumerate(round_orders(list(impls), rounds)):
            for name in order:
                fn = lambda q, k, v, impl=impls[name]: impl(q, k, v, causal)
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                # The backward reads the mode when it runs (inside autograd.grad): hold it there.
                with deterministic_mode(name == "tk-det"):
                    with torch.no_grad():
                        f = bench(lambda: fn(q, k, v))
                    fb = bench(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
                rows.append((shape, r, name, flops / f / 1e9, 3.5 * flops / fb / 1e9,
                             2.5 * flops / (fb - f) / 1e9))
                print(rows[-1], flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()
    print("\n| Hq:Hkv:S | round | impl | fwd TFLOP/s | fwd+bwd TFLOP/s | bwd alone TFLOP/s |")
    print("|---|---|---|---|---|---|")
    for sh, r, n, ft, fbt, bt in rows:
        print(f"| {sh} | {r} | {n} | {ft:.0f} | {fbt:.0f} | {bt:.0f} |")


if __name__ == "__main__":
    main()
