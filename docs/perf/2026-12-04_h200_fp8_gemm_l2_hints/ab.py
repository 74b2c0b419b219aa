"""L2 eviction hints on the FP8 GEMM's TMA traffic, through `run()` of 5g's ab.py (one process,
builds rotated round by round, `_scaled_mm` beside them). The tree is main (an A/A pair with
"main"); each variant is main's GEMM with cache policies on some of its TMA copies:
  A last:   A's K slices loaded EVICT_LAST. In the M-grouped tile order a group's 16 A panels
            (16 MB at K = 8192) are read again by every wave of the group (about 4), while each
            B panel is read by one wave only;
  C first:  the bf16 output stored EVICT_FIRST (written once, never read here);
  A last, C first: both;
  + B first: both, and B's K slices loaded EVICT_FIRST.

  python3 docs/perf/2026-12-04_h200_fp8_gemm_l2_hints/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)


def _sub(t, old, new, count):
    assert t.count(old) == count, (old, t.count(old))
    return t.replace(old, new)


def a_last(t):
    return _sub(t, "tma::load_async(a_s[s]", "tma::load_async<dim::ROW, cache_policy::EVICT_LAST>(a_s[s]", 2)


def b_first(t):
    return _sub(t, "tma::load_async(b_s[s]", "tma::load_async<dim::ROW, cache_policy::EVICT_FIRST>(b_s[s]", 1)


def c_first(t):
    return _sub(t, "tma::store_async(g.c,", "tma::store_async<dim::ROW, cache_policy::EVICT_FIRST>(g.c,", 1)


VARIANTS = {
    "A last": ("titankit_tk_gemm_alast", a_last),
    "C first": ("titankit_tk_gemm_cfirst", c_first),
    "A last, C first": ("titankit_tk_gemm_alast_cfirst", lambda t: c_first(a_last(t))),
    "+ B first": ("titankit_tk_gemm_alast_bcfirst", lambda t: b_first(c_first(a_last(t)))),
}

if __name__ == "__main__":
    lib.run("tree (= main)", VARIANTS)
