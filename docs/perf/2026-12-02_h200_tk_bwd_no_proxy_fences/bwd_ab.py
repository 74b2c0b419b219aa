"""A/B of the ThunderKittens attention backward with and without TK's per-wgmma fence.proxy.async
(TK_NOPF=1 picks the variant per launch; the patch in this folder). For each shape: gradients of
both variants against each other (dK, dV must be bitwise equal; dQ's fp32 adds run in varying
order), then forward+backward do_bench medians, variants interleaved, rotated each round, the GPU
idle `cooldown` seconds before each measurement.

  python3 docs/perf/2026-12-02_h200_tk_bwd_no_proxy_fences/bwd_ab.py [shapes] [rounds] [cooldown]
"""
import os
import sys
import time

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import ops


def run(q, k, v, do, nopf):
    os.environ["TK_NOPF"] = "1" if nopf else "0"
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    return torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)


def main():
    shapes = (sys.argv[1] if len(sys.argv) > 1 else "anchor,8b,70b-tp8").split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 2.0
    print("| shape | variant | fwd+bwd TFLOP/s by round | median | dQ max abs diff | dK, dV bitwise |")
    print("|---|---|---|---|---|---|")
    for name in shapes:
        b, hq, hkv, s, d = B.ATTN_SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
        ref = run(q, k, v, do, False)
        new = run(q, k, v, do, True)
        dq_diff = (ref[0].float() - new[0].float()).abs().max().item()
        same = torch.equal(ref[1], new[1]) and torch.equal(ref[2], new[2])
        flops = 3.5 * 4.0 * b * hq * s * s * d / 2
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        res = {False: [], True: []}
        for r in range(rounds):
            for nopf in ((False, True) if r % 2 == 0 else (True, False)):
                time.sleep(cooldown)
                os.environ["TK_NOPF"] = "1" if nopf else "0"
                ms = B._time(lambda: torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do))
                res[nopf].append(flops / ms / 1e9)
        for nopf in (False, True):
            tf = res[nopf]
            print(f"| {name} | {'no proxy fences' if nopf else 'committed'} | {', '.join(f'{x:.0f}' for x in tf)} | "
                  f"{sorted(tf)[len(tf) // 2]:.0f} | {dq_diff:.1e} | {same} |", flush=True)


if __name__ == "__main__":
    main()
