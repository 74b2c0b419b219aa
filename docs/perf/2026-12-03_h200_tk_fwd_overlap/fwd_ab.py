"""A/B of ThunderKittens attention forward variants (TK_FWD_VAR picks one per launch; the patch in
this folder): 0 committed, 1 O rescaled while S_i = Q K_i^T runs (FlashAttention-3's order: the
rescale by the previous step's correction comes before P_{i-1} V_{i-1} is issued, not after it
retired; the same operations in the same order), 4 Q K^T with Q from registers (loaded once), 5 both.
For each shape: every variant's output and LSE against variant 0 (all four should be bitwise equal; the
column gives the largest differences where not), then forward and forward+backward do_bench medians,
variants interleaved and rotated each round, the GPU idle `cooldown` s before each.

  python3 docs/perf/2026-12-03_h200_tk_fwd_overlap/fwd_ab.py [shapes] [variants] [rounds] [cooldown]
"""
import os
import sys

# 4p's A/B loop (the same TK_FWD_VAR switch); its folder first on the path, as both scripts are
# named fwd_ab.py.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "2026-12-02_h200_tk_fwd_pingpong"))
import fwd_ab as pingpong_fwd_ab  # noqa: E402

if __name__ == "__main__":
    pingpong_fwd_ab.main(default_variants="0,1,4,5", diffs=True)
