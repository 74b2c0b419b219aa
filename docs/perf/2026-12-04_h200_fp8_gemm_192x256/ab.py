"""The A/Bs of section 5k, through `run()` of 5g's ab.py (one process, builds rotated round by round,
`_scaled_mm` beside them). The tree holds gemm_192x256_stagger.patch (call 1: without its stagger);
AB_SET picks the call's builds:
  call1: the tree ("192x256") against main;
  call2: the tree ("stagger") against the same kernel without the stagger and main;
  call3: also both kernels with their output stores skipped at run time (wrong results by construction).

  AB_SET=call2 python3 docs/perf/2026-12-04_h200_fp8_gemm_192x256/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
import os
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

SYNC = 'if (wg > 0) asm volatile("bar.sync %0, %1;\\n" ::"r"(STAGGER_BAR + wg - 1), "n"(256) : "memory");'
RELEASED = "bool released = wg == CONSUMERS - 1;"


def no_stagger(t):
    """The tree without the staggered start: nobody waits, nobody arrives."""
    assert t.count(SYNC) == 1 and t.count(RELEASED) == 1
    return t.replace(SYNC, "").replace(RELEASED, "bool released = true;")


def tree_no_c(t):
    """The tree's store_tile skipped at run time (conversion, staging, TMA stores; scaling runs)."""
    assert t.count("        store_tile(mn);") == 1
    return t.replace("        store_tile(mn);", "        if (g.m < 0) store_tile(mn);")


def main_no_c(_):
    """main's store_out skipped at run time (its conversion into `out` still runs)."""
    t = lib.main_text()
    a, b = "if (kk == store_at && out_mn.x >= 0) store_out();", "if (out_mn.x >= 0) store_out();"
    assert t.count(a) == 1 and t.count(b) == 1
    return t.replace(a, "if (kk == store_at && g.m < 0) store_out();").replace(b, "if (g.m < 0) store_out();")


SETS = {
    "call1": ("192x256", {}),
    "call2": ("stagger", {"192x256": ("titankit_tk_gemm_nostagger", no_stagger)}),
    "call3": ("192x256", {"192 no C": ("titankit_tk_gemm_192noc", tree_no_c),
                          "main no C": ("titankit_tk_gemm_mainnoc", main_no_c)}),
}

if __name__ == "__main__":
    lib.run(*SETS[os.environ["AB_SET"]])
