"""Is the FP8 GEMM's deferred store (`store_out`) exposed? Through `run()` of 5g's ab.py (one
process, builds rotated round by round, `_scaled_mm` beside them). The tree is main (an A/A pair
with "main"); the variants are main's GEMM with text edits:
  store at +2, 3 in flight: the previous tile's stores run after the third K slice of the next
      tile is issued, and the consumer does not wait for the first slice to retire before issuing
      the second, so three slices of wgmmas (about 3,000 tensor-core clocks for both consumers)
      are queued while it stores, against up to two in main;
  store at +3, 3 in flight: the same, one slice later;
  no C: the stores skipped at run time (wrong results; the scaling and rounding still run): the
      most that hiding them could give.
AB_SET=prefetch (call 2) times instead:
  L2 prefetch +D: the producer also asks L2 for the A and B boxes of the slice D ahead in the
      same unit (cp.async.bulk.prefetch.tensor, no shared memory; at a unit's first slice, for the
      next D slices), before it waits for a free stage. The CTAs that share a panel read it at
      nearly the same time, so most fills would otherwise wait on HBM together.
AB_SET=release (call 3):
  early release: when a slice's stage has not landed yet (mbarrier.test_wait, decided per warp by
      lane 0), the consumer first waits for its previous slice's wgmmas and frees that stage, then
      waits for the data. main frees the previous stage only after issuing the next slice, so a
      late fill also delays the producer's next one.

  python3 docs/perf/2026-12-04_h200_fp8_gemm_timeline/ab.py [rounds] [cooldown] [shapes]
"""
import importlib.util
import os
from pathlib import Path

_spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path(__file__).resolve().parent.parent / "2026-12-03_h200_fp8_gemm_256x128" / "ab.py")
lib = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(lib)

LOOP = """        const int store_at = min(kb + 1, ke - 1);  // after this slice's wgmmas are issued
        int prev = -1;
        for (int kk = kb; kk < ke; kk++, it++) {
            const int s = it % STAGES;
            wait(full[s], (it / STAGES) & 1);
            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
            else warpgroup::mma_ABt(acc, a_s[s][wg], b_s[s]);
            if (kk == store_at && out_mn.x >= 0) store_out();
            warpgroup::mma_async_wait<1>();  // the wgmma of the previous slice has retired
            if (prev >= 0) warp::arrive(empty[prev]);
            prev = s;
        }
"""

# The slice before store_at skips its wait, so its stage and the one before stay held (prev2, prev)
# until the wait after the stores, which retires both.
DEEP = """        const int store_at = min(kb + {at}, ke - 1);
        int prev = -1, prev2 = -1;
        for (int kk = kb; kk < ke; kk++, it++) {{
            const int s = it % STAGES;
            wait(full[s], (it / STAGES) & 1);
            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
            else warpgroup::mma_ABt(acc, a_s[s][wg], b_s[s]);
            const bool pending = out_mn.x >= 0;
            if (kk == store_at && pending) store_out();
            if (pending && kk + 1 == store_at) {{
                prev2 = prev;
                prev = s;
                continue;
            }}
            warpgroup::mma_async_wait<1>();
            if (prev2 >= 0) warp::arrive(empty[prev2]);
            prev2 = -1;
            if (prev >= 0) warp::arrive(empty[prev]);
            prev = s;
        }}
"""


def _sub(t, old, new, count=1):
    assert t.count(old) == count, (old[:60], t.count(old))
    return t.replace(old, new)


def deep(at):
    return lambda t: _sub(t, LOOP, DEEP.format(at=at))


def no_c(t):
    t = _sub(t, "if (kk == store_at && out_mn.x >= 0) store_out();",
             "if (kk == store_at && out_mn.x >= 0 && g.m < 0) store_out();")
    return _sub(t, "    if (out_mn.x >= 0) store_out();\n", "    if (out_mn.x >= 0 && g.m < 0) store_out();\n")


PRODUCER = """                for (int kk = kb; kk < ke; kk++, it++) {
                    const int s = it % STAGES;
                    wait(empty[s], ((it / STAGES) & 1) ^ 1);  // fresh barrier: passes at once
"""

PREFETCH = """                for (int kk = kb; kk < ke; kk++, it++) {{
                    for (int p = kk == kb ? kk + 1 : kk + {d}; p <= kk + {d} && p < ke; p++) {{
                        tma::prefetch(a_s[0][0], g.a, {{2 * mn.x, p}});
                        tma::prefetch(a_s[0][1], g.a, {{2 * mn.x + 1, p}});
                        tma::prefetch(b_s[0], g.b, {{mn.y, p}});
                    }}
                    const int s = it % STAGES;
                    wait(empty[s], ((it / STAGES) & 1) ^ 1);  // fresh barrier: passes at once
"""


CONSUMER_WAIT = """            const int s = it % STAGES;
            wait(full[s], (it / STAGES) & 1);
            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
"""

EARLY = """            const int s = it % STAGES;
            if (prev >= 0 && !stage_landed(full[s], (it / STAGES) & 1)) {
                warpgroup::mma_async_wait<0>();
                warp::arrive(empty[prev]);
                prev = -1;
            }
            wait(full[s], (it / STAGES) & 1);
            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
"""

LANDED = """template <bool TENSORWISE>
__global__"""

LANDED_FN = """__device__ __forceinline__ bool stage_landed(semaphore& sem, int phase) {
    uint32_t ok;
    asm volatile("{\\n.reg .pred P1;\\nmbarrier.test_wait.parity.shared::cta.b64 P1, [%1], %2;\\n"
                 "selp.b32 %0, 1, 0, P1;\\n}\\n"
                 : "=r"(ok) : "r"((uint32_t)__cvta_generic_to_shared(&sem)), "r"(phase) : "memory");
    return __shfl_sync(0xffffffffu, ok, 0) != 0;  // one decision per warp
}

template <bool TENSORWISE>
__global__"""


def early_release(t):
    return _sub(_sub(t, CONSUMER_WAIT, EARLY), LANDED, LANDED_FN)


def prefetch(d):
    return lambda t: _sub(t, PRODUCER, PREFETCH.format(d=d))


SETS = {
    "store": {
        "store at +2, 3 in flight": ("titankit_tk_gemm_deep2", deep(2)),
        "store at +3, 3 in flight": ("titankit_tk_gemm_deep3", deep(3)),
        "no C": ("titankit_tk_gemm_noc", no_c),
    },
    "prefetch": {
        "L2 prefetch +4": ("titankit_tk_gemm_pf4", prefetch(4)),
        "L2 prefetch +8": ("titankit_tk_gemm_pf8", prefetch(8)),
    },
    "release": {
        "early release": ("titankit_tk_gemm_early", early_release),
    },
}

if __name__ == "__main__":
    lib.run("tree (= main)", SETS[os.environ.get("AB_SET", "store")])
