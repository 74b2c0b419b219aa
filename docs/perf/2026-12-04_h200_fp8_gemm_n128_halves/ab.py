"""What the FP8 GEMM's mainloop costs with N = 128 wgmmas: every K slice as two m64n128k32 chains
(the left and right column halves of the consumer's 64 x 256 accumulator, one commit group each)
instead of one m64n256k32 chain; epilogue unchanged. An epilogue that overlaps the next tile's first
wgmmas needs such halves (docs/benchmarks.md 5b, 5g), so if they cost more than the epilogue (about
1% at 8192^3), that design cannot win. Builds: the tree ("tree"), main's kernel from AB_MAIN_GEMM or
`git show HEAD:` ("main"; the same source as the tree here, so tree vs main is an A/A), and "n128".
The measurement is 5g's (../2026-12-03_h200_fp8_gemm_256x128/ab.py, gemm_ab).

  python3 docs/perf/2026-12-04_h200_fp8_gemm_n128_halves/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

ONE_CHAIN = """            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
            else warpgroup::mma_ABt(acc, a_s[s][wg], b_s[s]);
"""
TWO_CHAINS = """            {
                auto& accl = *reinterpret_cast<rt_fl<16, BN / 2>*>(&acc.tiles[0][0]);
                auto& accr = *reinterpret_cast<rt_fl<16, BN / 2>*>(&acc.tiles[0][BN / 32]);
                auto* bh = reinterpret_cast<st_fp8e4m3<BN / 2, BK>*>(&b_s[s]);
                if (kk == kb) {
                    warpgroup::mm_ABt(accl, a_s[s][wg], bh[0]);
                    warpgroup::mm_ABt(accr, a_s[s][wg], bh[1]);
                } else {
                    warpgroup::mma_ABt(accl, a_s[s][wg], bh[0]);
                    warpgroup::mma_ABt(accr, a_s[s][wg], bh[1]);
                }
            }
"""
WAIT_ONE = "warpgroup::mma_async_wait<1>();  // the wgmma of the previous slice has retired"
WAIT_TWO = "warpgroup::mma_async_wait<2>();  // the previous slice's two groups retired"


def two_chains(text):
    assert text.count(ONE_CHAIN) == 1 and text.count(WAIT_ONE) == 1
    return text.replace(ONE_CHAIN, TWO_CHAINS).replace(WAIT_ONE, WAIT_TWO)


if __name__ == "__main__":
    lib.run("tree", {"n128": ("titankit_tk_gemm_n128", two_chains)})
