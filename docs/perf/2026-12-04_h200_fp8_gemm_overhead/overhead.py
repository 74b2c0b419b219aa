"""Where the TK FP8 GEMM's do_bench time goes besides its kernel: the op as the bench calls it
(`op`), the extension called with buffers allocated once (`raw`: the flag memset stays), and the
GPU time of each kernel under torch.profiler, L2 flushed before every call as do_bench does.
`_scaled_mm` (fast accumulation) the same way. Rounds interleaved.

  python3 docs/perf/2026-12-04_h200_fp8_gemm_overhead/overhead.py [rounds] [shapes]
"""
import statistics
import sys

import torch
import triton

from kernels.fp8 import reference as R
from kernels.thunderkittens import build, ops

SHAPES = {"8192^3": (8192, 8192, 8192), "8B w1/w3": (8192, 14336, 4096),
          "70B w2": (8192, 8192, 28672)}


def device_us(fn, cache, n=30):
    """{kernel name: mean GPU us per call} over n calls, each after an L2 flush. The flush is a
    bitwise_not over 256 MB (its own kernel name, left out of the result; do_bench zeroes instead,
    a fill kernel like the flag memset's)."""
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            cache.bitwise_not_()
            fn()
        torch.cuda.synchronize()
    out = {}
    for e in prof.key_averages():
        t = getattr(e, "self_device_time_total", None)
        if t is None:
            t = e.self_cuda_time_total
        if t and "bitwise_not" not in e.key:
            out[e.key[:60]] = t / n
    return out


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SHAPES)
    ext = build.extension()
    cache = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    rows = []
    for name in names:
        m, n, k = SHAPES[name]
        flop = 2.0 * m * n * k
        g = torch.Generator(device="cuda").manual_seed(0)
        qx, sx = R.quantize_rowwise(torch.randn(m, k, device="cuda", generator=g))
        qw, sw = R.quantize_rowwise(torch.randn(n, k, device="cuda", generator=g) * 0.02)
        sw = sw.reshape(1, n)
        c = torch.empty(m, n, dtype=torch.bfloat16, device="cuda")
        n_p, n_f = ext.fp8_gemm_rowwise_workspace(m, n, k)
        part = torch.empty(n_p, dtype=torch.float32, device="cuda") if n_p else None
        flags = torch.zeros(n_f, dtype=torch.int32, device="cuda") if n_p else None
        sa, sb = sx.reshape(m), sw.reshape(n)
        stream = torch.cuda.current_stream().cuda_stream

        def raw():
            if flags is not None:
                flags.zero_()
            ext.fp8_gemm_rowwise(qx, qw, sa, sb, c, part, flags, stream)

        fns = {"op": lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw), "raw": raw,
               "_scaled_mm": lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16,
                                                      use_fast_accum=True)}
        ref = fns["op"]().float()
        raw()
        assert torch.equal(c.float(), ref), "raw and op differ"
        bench = {f: [] for f in fns}
        kern = {f: [] for f in fns}
        for r in range(rounds):
            order = list(fns)[r % 3:] + list(fns)[:r % 3]
            for f in order:
                bench[f].append(triton.testing.do_bench(fns[f], warmup=25, rep=200,
                                                        return_mode="median"))
                kern[f].append(device_us(fns[f], cache))
        for f in fns:
            ms = statistics.median(bench[f])
            ks = {}
            for d in kern[f]:
                for key, us in d.items():
                    ks.setdefault(key, []).append(us)
            detail = "; ".join(f"{key} {statistics.median(v):.1f} us" for key, v in ks.items())
            gemm_us = max(statistics.median(v) for v in ks.values())
            rows.append(f"| {name} | {f} | {ms * 1e3:.1f} | {flop / ms / 1e9:.0f} | "
                        f"{', '.join(f'{flop / b / 1e9:.0f}' for b in bench[f])} | "
                        f"{gemm_us:.1f} | {flop / gemm_us / 1e6:.0f} | {detail} |")
            print(rows[-1], flush=True)
    print("\n| shape | impl | do_bench us | TFLOP/s | by round | longest kernel us | its TFLOP/s | "
          "kernels (GPU us per call) |")
    print("|---|---|---|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
