"""Call 3's A/B (ab.py's measurement): main's 128 x 256 kernel against the 256 x 128 kernel of
gemm_256x128_overlap.patch (the tree: M groups of 8 tiles) and the same with M groups of 16 tiles,
with and without the overlap.

  python3 docs/perf/2026-12-03_h200_fp8_gemm_256x128/ab_mgroup.py [rounds] [cooldown] [shapes]
"""
from ab import run  # this folder's ab.py (the script's directory)


def variant(super_m, overlap):
    def edit(t):
        assert "constexpr int SUPER_M = 8;" in t and "constexpr bool OVERLAP = true;" in t
        t = t.replace("constexpr int SUPER_M = 8;", f"constexpr int SUPER_M = {super_m};")
        return t.replace("constexpr bool OVERLAP = true;", f"constexpr bool OVERLAP = {str(overlap).lower()};")
    return edit


if __name__ == "__main__":
    run("overlap", {"overlap, M group 16": ("titankit_tk_gemm_ov16", variant(16, True)),
                    "no overlap, M group 16": ("titankit_tk_gemm_noov16", variant(16, False))})
