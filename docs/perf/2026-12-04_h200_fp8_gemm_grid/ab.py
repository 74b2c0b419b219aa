"""Does the FP8 GEMM lose anything by leaving SMs idle, when the 700 W cap sets the clock? Through
`run()` of 5g's ab.py (one process, builds rotated round by round, `_scaled_mm` beside them). The
tree is main (an A/A pair with "main"); the variants are main's GEMM with `make_plan` edited:
  grid 128: at most 128 CTAs. Every shape timed here has a multiple of 128 tiles of 128 x 256
      (8192^3: 2048, 8B w1/w3: 3584, 70B w2: 2048), so the waves come out whole and stream-K is
      off; 4 of the 132 SMs idle all launch. If the cap holds the power, the busy SMs clock higher.
  grid 124: 8 SMs idle; stream-K on the partial last wave as in main.
  grid 100: 32 SMs idle (a point further along the same curve).
  132, no stream-K: main's grid, data-parallel only: the last wave's idle SMs, what stream-K is
      there to recover.
AB_SET=plan (call 2) times two planners on more shapes, whole waves or not, short and long K:
  data-parallel: every shape on the 132 SMs, no stream-K;
  divisor: the largest grid in [0.95 x SMs, SMs] that divides the tile count, data-parallel;
      where none does, main's plan (stream-K on the last waves when worth it) (call 2);
  divisor, else data-parallel: the same, data-parallel on all SMs where none divides (call 3).
Shape names hold no commas (the command line's list is comma-separated; call 2 stopped at one).

  python3 docs/perf/2026-12-04_h200_fp8_gemm_grid/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
import os
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

SMS = "    const int sms = detail::num_sms();\n"
SK = "    if (tiles > p.grid && rem != 0 &&\n"


def _sub(t, old, new):
    assert t.count(old) == 1, (old, t.count(old))
    return t.replace(old, new)


def cap(n):
    return lambda t: _sub(t, SMS, f"    const int sms = detail::num_sms() < {n} ? detail::num_sms() : {n};\n")


VARIANTS = {
    "grid 128": ("titankit_tk_gemm_g128", cap(128)),
    "grid 124": ("titankit_tk_gemm_g124", cap(124)),
    "grid 100": ("titankit_tk_gemm_g100", cap(100)),
    "132, no stream-K": ("titankit_tk_gemm_nosk", lambda t: _sub(t, SK, "    if (false && tiles > p.grid && rem != 0 &&\n")),
}

PLAN = """    plan p{tiles < sms ? tiles : sms, 0};
    const int rem = tiles % p.grid;
"""
DIVISOR = """    if (tiles > sms) {  // whole waves on a few SMs fewer
        for (int g = sms; g * 20 >= sms * 19; g--) {
            if (tiles % g == 0) return {g, 0};
        }
    }
""" + PLAN

PLAN_VARIANTS = {
    "data-parallel": ("titankit_tk_gemm_dp", lambda t: _sub(t, SK, "    if (false && tiles > p.grid && rem != 0 &&\n")),
    "divisor": ("titankit_tk_gemm_div", lambda t: _sub(t, PLAN, DIVISOR)),
}
if os.environ.get("AB_CALL") == "3":
    del PLAN_VARIANTS["divisor"]
    PLAN_VARIANTS["divisor else DP"] = ("titankit_tk_gemm_divdp", lambda t: _sub(
        _sub(t, PLAN, DIVISOR), SK, "    if (false && tiles > p.grid && rem != 0 &&\n"))
# (M, N, K) -> 128 x 256 tiles: waves on 132 SMs, and the divisor planner's grid.
lib.SHAPES.update({
    "8B wk/wv": (8192, 1024, 4096),          # 256 tiles: 1.94 waves; divisor 128
    "1.5 waves": (3200, 2048, 8192),         # 200 tiles; no divisor in 126-132
    "1.5 waves K28672": (3200, 2048, 28672),
    "4.5 waves": (9600, 2048, 8192),         # 600 tiles; none
    "16.2 waves": (8576, 8192, 8192),        # 2144 tiles; none
    "16.2 waves K28672": (8576, 8192, 28672),
    "1.06 waves": (4480, 1024, 8192),        # 140 tiles: 8 in the second wave; none
    "15.8 waves": (8320, 8192, 8192),        # 2080 tiles; divisor 130
})

if __name__ == "__main__":
    if os.environ.get("AB_SET") == "plan":
        lib.run("tree (= main)", PLAN_VARIANTS)
    else:
        lib.run("tree (= main)", VARIANTS)
