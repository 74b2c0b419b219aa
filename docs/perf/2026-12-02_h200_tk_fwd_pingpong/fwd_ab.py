"""A/B of ThunderKittens attention forward variants (TK_FWD_VAR picks one per launch; the patch in
this folder): 0 committed, 1 consumer turns (FA3's inter-warpgroup ping-pong: each consumer issues
its Q K^T and P V wgmmas only in its turn, so one's softmax overlaps the other's wgmmas), 2 no
per-wgmma proxy fence before Q K^T, 3 both, 7 both + consumer 1 skips the K/V mbarrier waits (its
turn comes after consumer 0 waited on them). For each shape: every variant's output and LSE against
variant 0 (must be bitwise equal: the arithmetic is the same), then forward and forward+backward
do_bench medians, variants interleaved and rotated each round, the GPU idle `cooldown` s before each.

  python3 docs/perf/2026-12-02_h200_tk_fwd_pingpong/fwd_ab.py [shapes] [variants] [rounds] [cooldown]
"""
import os
import sys
import time

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import ops


def set_var(v):
    os.environ["TK_FWD_VAR"] = str(v)


def main(default_variants="0,1,2,3,7", diffs=False):
    """diffs: where a variant's output or LSE is not bitwise the first variant's, print their largest
    absolute differences instead of False (4y's use)."""
    shapes = (sys.argv[1] if len(sys.argv) > 1 else "anchor,8b,70b-tp8").split(",")
    variants = [int(x) for x in (sys.argv[2] if len(sys.argv) > 2 else default_variants).split(",")]
    rounds = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    cooldown = float(sys.argv[4]) if len(sys.argv) > 4 else 2.0
    fwd_op = torch.ops.titankit.tk_attn_fwd
    check = "out, lse vs 0 (bitwise, or max abs difference)" if diffs else "out, lse bitwise vs 0"
    print(f"| shape | variant | fwd by round | fwd median | fwd+bwd by round | fwd+bwd median | {check} |")
    print("|---|---|---|---|---|---|---|")
    for name in shapes:
        b, hq, hkv, s, d = B.ATTN_SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
        same = {}
        for var in variants:
            set_var(var)
            out, lse = fwd_op(q, k, v, True)
            torch.cuda.synchronize()
            if var == variants[0]:
                ref = (out.clone(), lse.clone())
            same[var] = torch.equal(out, ref[0]) and torch.equal(lse, ref[1])
            if diffs and not same[var]:
                same[var] = (f"out {(out.float() - ref[0].float()).abs().max().item():.1e}, "
                             f"lse {(lse - ref[1]).abs().max().item():.1e}")
        fwd_flops = 4.0 * b * hq * s * s * d / 2
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        fwd = {var: [] for var in variants}
        both = {var: [] for var in variants}
        for r in range(rounds):
            order = variants[r % len(variants):] + variants[:r % len(variants)]
            for var in order:
                set_var(var)
                time.sleep(cooldown)
                fwd[var].append(fwd_flops / B._time(lambda: fwd_op(q, k, v, True)) / 1e9)
                time.sleep(cooldown)
                ms = B._time(lambda: torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do))
                both[var].append(3.5 * fwd_flops / ms / 1e9)
        med = lambda x: sorted(x)[len(x) // 2]  # noqa: E731
        for var in variants:
            print(f"| {name} | {var} | {', '.join(f'{x:.0f}' for x in fwd[var])} | {med(fwd[var]):.0f} | "
                  f"{', '.join(f'{x:.0f}' for x in both[var])} | {med(both[var]):.0f} | {same[var]} |", flush=True)


if __name__ == "__main__":
    main()
