"""A/B of the TK FP8 GEMM: the kernel in the tree ("tree": K slices of 64 in an 8-stage ring,
bk64.patch) against main's (K slices of 128, 4 stages), built from `git show HEAD:`. The measurement
is section 5g's (../2026-12-03_h200_fp8_gemm_256x128/ab.py, gemm_ab): one process, builds rotated
round by round, `cooldown` s idle before each measurement, `_scaled_mm` fast accumulation beside
them; each build's relative error against the fp32 product and its largest difference from main.

  python3 docs/perf/2026-12-03_h200_fp8_gemm_bk64/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

if __name__ == "__main__":
    lib.run("tree", {})
