"""A/B of the ThunderKittens backward with its loop's wgmma descriptors and lse2 / delta addresses
built once before the loop (desc.patch), alone and on 4zb's tile walk (desc_walker.patch), against
main. Run with desc_walker.patch applied to the tree ("desc_walker" = the tree's build); "main" is
the tree's sources with the patch reversed, "desc" the same plus desc.patch. One process, 4r's
attention A/B (checks of desc_walker against main; do_bench medians of the forward and
forward+backward, builds in rotated order each round, `cooldown` s idle before each measurement).

  git apply docs/perf/2026-12-03_h200_tk_bwd_desc/desc_walker.patch
  python3 docs/perf/2026-12-03_h200_tk_bwd_desc/ab.py [rounds] [cooldown]
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


def main_text(name, text):
    return fused_ab.patched(name, text, True, HERE / "desc_walker.patch")


def desc_text(name, text):
    return fused_ab.patched(name, main_text(name, text), False, HERE / "desc.patch")


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 5
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"desc_walker": build.extension()}
    exts["main"] = alloc_ab.edited_extension("titankit_tk_main", main_text)
    exts["desc"] = alloc_ab.edited_extension("titankit_tk_desc", desc_text)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    alloc_ab.attention_ab(exts, rounds, cooldown)
