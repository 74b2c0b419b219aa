"""A/B of the ThunderKittens backward walking its tiles by additions ("tree": the working tree,
which holds walker.patch) against main before it ("head": the tree's kernel sources with
walker.patch reversed), in one process: 4r's attention A/B (forward output and LSE bitwise, dK and
dV bitwise, dQ's largest difference; do_bench medians of the forward and forward+backward, builds
alternating first round by round, `cooldown` s idle before each measurement).

  python3 docs/perf/2026-12-03_h200_tk_bwd_walker/ab.py [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

from kernels.thunderkittens import build

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(HERE.parent / "2026-12-03_h200_tk_bwd_fused_dq"))
import alloc_ab  # noqa: E402  (edited_extension, attention_ab)
import ab as fused_ab  # noqa: E402  (patched: one file's part of a patch, applied or undone)

if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"tree": build.extension()}
    exts["head"] = alloc_ab.edited_extension(
        "titankit_tk_head", lambda name, text: fused_ab.patched(name, text, True, HERE / "walker.patch"))
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    alloc_ab.attention_ab(exts, rounds, cooldown)
