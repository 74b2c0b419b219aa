"""A/B of the TK FP8 GEMM: the tree's kernel ("tree": the rowwise column scales loaded two per
thread during the last K slice and shared through shared memory) against main's (each thread loads
its 64 column scales in the epilogue). The measurement is section 5g's
(../2026-12-03_h200_fp8_gemm_256x128/ab.py, gemm_ab): one process, builds rotated round by round,
`cooldown` s idle before each measurement, `_scaled_mm` fast accumulation beside them.

  python3 docs/perf/2026-12-04_h200_fp8_gemm_smem_scales/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

if __name__ == "__main__":
    lib.run("tree", {})
