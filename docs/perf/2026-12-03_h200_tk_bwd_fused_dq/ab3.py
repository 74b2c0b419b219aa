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
from kernels.thunderkittens import build  # noqa: E402

ACQ_REL = "atom.acq_rel.gpu.global.add.s32"


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"head": build.extension()}
    exts["release"] = ab.alloc_ab.edited_extension(
        "titankit_tk_release", ab2.fused((ACQ_REL, "atom.release.gpu.global.add.s32")))
    exts["relaxed"] = ab.alloc_ab.edited_extension(
        "titankit_tk_relaxed", ab2.fused((ACQ_REL, "atom.relaxed.gpu.global.add.s32")))
    print(f"builds {time.time() - t0:.0f} s", flush=True)

    def check(step):
        ref, rel = step("head"), step("release")
        same = torch.equal(ref[1], rel[1]) and torch.equal(ref[2], rel[2])
        print(f"release vs head: dk, dv bitwise {same}; "
              f"dq max diff {(ref[0].float() - rel[0].float()).abs().max().item():.1e}", flush=True)

    ab2.anchor_ab(exts, rounds, cooldown, check)


if __name__ == "__main__":
    main()
