"""Time the ThunderKittens attention backward with parts of it left out (results are wrong then).

Needs ablation.patch applied (TK_SKIP bits: 1 no dQ wgmmas/staging/reduce-add, the dS^T hand-over
kept; 2 no dQ reduce-add; 4 no softmax math; 8 no dS^T store, hand-over or dQ; 16 no wait for the
staging tile's TMA read (racy); 32 dQ reduce-adds into one tile per CTA instead of dQ's rows):

    git apply docs/perf/2026-11-30_h200_tk_bwd_experiments/ablation.patch
    PYTHONPATH=$PWD python3 docs/perf/2026-11-30_h200_tk_bwd_experiments/ablate.py "0:full,2:no reduce-add"
"""
import os
import sys

import torch
import triton

import kernels.thunderkittens.ops  # noqa: F401  (registers torch.ops.titankit.*)

SHAPES = {"anchor": (1, 64, 8, 8192, 128), "8b": (1, 32, 8, 8192, 128)}
masks = [(int(m.split(":")[0]), m.split(":")[1]) for m in sys.argv[1].split(",")]
for name, (b, hq, hkv, s, d) in SHAPES.items():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
                   for h in (hq, hkv, hkv, hq))
    out, lse = torch.ops.titankit.tk_attn_fwd(q, k, v, True)
    flops = 2.5 * 4.0 * b * hq * s * s * d / 2  # the full backward's, also when parts are skipped
    for mask, what in masks:
        os.environ["TK_SKIP"] = str(mask)
        ms = triton.testing.do_bench(
            lambda: torch.ops.titankit.tk_attn_bwd(do, q, k, v, out, lse, True, None),
            warmup=20, rep=100)
        print(f"| {name} | {mask} | {what} | {ms:.3f} | {flops / ms / 1e9:.0f} |", flush=True)
