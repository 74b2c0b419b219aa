"""Call 3: which part of the counting warps' atom.acq_rel.gpu costs (anchor shape). Main ("head")
against fused_dq.patch with the count made `atom.release.gpu` ("release": no acquire, so no
CCTL.IVALL; the warp that completes a block still fences with __threadfence before converting, so
this one is correct) and with `atom.relaxed.gpu` ("relaxed": no fence at all, wrong on purpose, timed
only). do_bench medians of forward + backward, builds rotated round by round; release's dQ compared
with main's.

  python3 docs/perf/2026-12-03_h200_tk_bwd_fused_dq/ab3.py [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab  # noqa: E402
import ab2  # noqa: E402
from kernels.thunderkittens import bench as B  # noqa: E402
from kernels.thunderkittens import build, ops  # noqa: E402

ACQ_REL = "atom.acq_rel.gpu.global.add.s32"


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"head": build.extension()}
    exts["release"] = ab.load("titankit_tk_release", ab.sources(
        lambda f: ab2.apply(f, (ACQ_REL, "atom.release.gpu.global.add.s32"))))
    exts["relaxed"] = ab.load("titankit_tk_relaxed", ab.sources(
        lambda f: ab2.apply(f, (ACQ_REL, "atom.relaxed.gpu.global.add.s32"))))
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    names = list(exts)
    b, hq, hkv, s, d = B.ATTN_SHAPES["anchor"]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    flops = 4.0 * b * hq * s * s * d / 2

    def step(n):
        build._EXTENSION = exts[n]
        out, lse = ops.tk_attn_fwd(q, k, v, True)
        if n == "head":
            return ops.tk_attn_bwd(do, q, k, v, out, lse, True, None)
        return ab2.fused_bwd(exts[n], do, q, k, v, out, lse)

    ref, rel = step("head"), step("release")
    print(f"release vs head: dk, dv bitwise {torch.equal(ref[1], rel[1]) and torch.equal(ref[2], rel[2])}; "
          f"dq max diff {(ref[0].float() - rel[0].float()).abs().max().item():.1e}", flush=True)
    both = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(cooldown)
            both[n].append(3.5 * flops / B._time(lambda n=n: step(n)) / 1e9)
    print("| anchor | fwd+bwd TFLOP/s by round | median |")
    print("|---|---|---|")
    for n in names:
        x = both[n]
        print(f"| {n} | {', '.join(f'{v:.0f}' for v in x)} | {sorted(x)[len(x) // 2]:.0f} |", flush=True)


if __name__ == "__main__":
    main()
