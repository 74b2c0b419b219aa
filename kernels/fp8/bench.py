"""`python -m kernels.bench fp8_gemm`: Triton FP8 GEMM vs torch._scaled_mm vs bf16 matmul.

Shapes are (M tokens, K in, N out) of Llama-3 linears at 8192 tokens, plus 8192^3:
  8B:  wq/wo 4096->4096, wk/wv 4096->1024, w1/w3 4096->14336, w2 14336->4096
  70B: wq/wo 8192->8192, wk/wv 8192->1024, w1/w3 8192->28672, w2 28672->8192
TFLOP/s = 2 M N K / median time on random data; quantization is not timed (GEMM only). "fast"
columns use fast accumulation (no fp32 promotion) on both sides; "promo" columns promote to fp32 every
128 of K (cuBLAS use_fast_accum=False; Triton max_num_imprecise_acc). The Triton columns call the
eager path of kernels.fp8.scaled_mm (no custom-op dispatch), as Float8Linear does.

Two timers (--timer):
- "graph": triton.testing.do_bench_cudagraph, one CUDA graph of many calls: GPU time only.
- "events": triton.testing.do_bench, CUDA events around each call after an L2 flush (the timer of
  the first H200 run). When a call's host time (Python, launch) exceeds the GPU time of the L2 flush
  plus the GEMM, the GPU idles inside the timed window and the small shapes read low.
The host time per call (us, GPU kept busy so the launches only queue) and the autotuner's pick per
shape are printed after the tables, so that slow cells can be told apart: host-bound or kernel-bound.
"max rel err" is Triton rowwise promo vs torch._scaled_mm rowwise promo, relative to the largest |out|.

ThunderKittens: when THUNDERKITTENS_ROOT points at a ThunderKittens clone and the extension builds
(kernels/thunderkittens/build.py; the first build takes minutes, then it is cached), "tk rw fast" and
"tk tw fast" columns time titankit's TK GEMM with rowwise and tensorwise scales (fast accumulation
only; one-element scales select its tensorwise kernel), and "tk rel err" / "tk tw rel err" compare
them with torch._scaled_mm fast with the same scales the same way. Otherwise one line says why the
columns are absent.
"""

from __future__ import annotations

import argparse
import time

import torch

from kernels.thunderkittens.build import unavailable_reason

SHAPES = {
    "square": [("8192^3", 8192, 8192, 8192)],
    "8b": [("8B wq/wo", 8192, 4096, 4096), ("8B wk/wv", 8192, 4096, 1024),
           ("8B w1/w3", 8192, 4096, 14336), ("8B w2", 8192, 14336, 4096)],
    "70b": [("70B wq/wo", 8192, 8192, 8192), ("70B wk/wv", 8192, 8192, 1024),
            ("70B w1/w3", 8192, 8192, 28672), ("70B w2", 8192, 28672, 8192)],
}
BASE_COLUMNS = ["bf16 mm", "scaled_mm tw fast", "triton tw fast", "scaled_mm rw fast", "triton rw fast",
                "scaled_mm rw promo", "triton rw promo"]
TK_COLUMNS = ["tk rw fast", "tk tw fast"]
TRITON_COLUMNS = [c for c in BASE_COLUMNS if c.startswith("triton")]


def _fns(M: int, K: int, N: int, with_tk: bool) -> dict:
    from kernels import fp8
    from kernels.fp8 import reference as R

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).bfloat16()
    qx_t, sx_t = R.quantize_tensorwise(x)
    qw_t, sw_t = R.quantize_tensorwise(w)
    qx_r, sx_r = R.quantize_rowwise(x)
    qw_r, sw_r = R.quantize_rowwise(w)
    sw_r = sw_r.reshape(1, -1)
    bf16 = torch.bfloat16

    def triton(a, b, sa, sb, fast):
        return lambda: fp8.scaled_mm(a, b, sa, sb, bf16, fast, "triton")

    def cublas(a, b, sa, sb, fast):
        return lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=bf16, use_fast_accum=fast)

    fns = {
        "bf16 mm": lambda: x @ w.t(),
        "scaled_mm tw fast": cublas(qx_t, qw_t.t(), sx_t, sw_t, True),
        "triton tw fast": triton(qx_t, qw_t.t(), sx_t, sw_t, True),
        "scaled_mm rw fast": cublas(qx_r, qw_r.t(), sx_r, sw_r, True),
        "triton rw fast": triton(qx_r, qw_r.t(), sx_r, sw_r, True),
        "scaled_mm rw promo": cublas(qx_r, qw_r.t(), sx_r, sw_r, False),
        "triton rw promo": triton(qx_r, qw_r.t(), sx_r, sw_r, False),
    }
    if with_tk:
        fns["tk rw fast"] = lambda: fp8.scaled_mm(qx_r, qw_r.t(), sx_r, sw_r, bf16, True, "thunderkittens")
        fns["tk tw fast"] = lambda: fp8.scaled_mm(qx_t, qw_t.t(), sx_t, sw_t, bf16, True, "thunderkittens")
    return fns


def _tuned_pick(fn) -> str:
    """Run fn once (autotuning its key if new) and describe the chosen config and the spread."""
    from kernels.fp8.gemm_fp8_sm90 import _fp8_gemm_tuned, clear_plans

    # Without its plan the call goes through the autotuner (a cache hit for a key tuned before, e.g.
    # 70B wq/wo after 8192^3), which then reports the config it uses.
    clear_plans()
    _fp8_gemm_tuned.configs_timings = None
    fn()
    torch.cuda.synchronize()
    best = _fp8_gemm_tuned.best_config
    k = best.kwargs
    pick = (f"{k['BLOCK_M']}x{k['BLOCK_N']}x{k['BLOCK_K']}{'s' if k['EPILOGUE_SPLIT'] else ''}"
            f"/w{best.num_warps}/st{best.num_stages}")
    timings = getattr(_fp8_gemm_tuned, "configs_timings", None)
    if timings:  # {config: [median, p20, p80] ms}; the slowest vs the chosen one
        t = sorted(v[0] if isinstance(v, (list, tuple)) else v for v in timings.values())
        pick += f" (of {len(t)}; slowest x{t[-1] / t[0]:.2f})"
    return pick


def _host_us(fn, calls: int = 100) -> float:
    """Host time per call in us: the GPU first spins ~50 ms, so the launches below only queue."""
    fn()
    torch.cuda.synchronize()
    torch.cuda._sleep(100_000_000)  # ~50 ms at ~2 GHz
    t0 = time.perf_counter()
    for _ in range(calls):
        fn()
    dt = time.perf_counter() - t0
    torch.cuda.synchronize()
    return dt / calls * 1e6


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.bench fp8_gemm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="square,8b,70b", help="comma list of: " + ", ".join(SHAPES))
    p.add_argument("--timer", default="both", choices=("graph", "events", "both"),
                   help="graph: GPU time (CUDA graph replay); events: do_bench (L2 flushed per call)")
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up time (ms)")
    p.add_argument("--rep", type=int, default=100, help="do_bench measuring time (ms)")
    args = p.parse_args(argv)
    groups = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [s for s in groups if s not in SHAPES]
    if bad:
        p.error(f"--shapes: unknown {bad}; valid: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("kernels.bench fp8_gemm needs a CUDA GPU (sm_90+ for the Triton kernel); nothing to do on CPU")
        # Status 2, not 0: a run that measured nothing must not pass for a finished benchmark
        # in a script or a sweep that checks the exit status.
        return 2
    import triton
    import triton.testing

    timers = ["graph", "events"] if args.timer == "both" else [args.timer]
    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    tk_missing = unavailable_reason()
    if tk_missing:
        print(f"ThunderKittens columns skipped: {tk_missing}")
    columns = BASE_COLUMNS + ([] if tk_missing else TK_COLUMNS)
    errs = ["max rel err"] + ([] if tk_missing else ["tk rel err", "tk tw rel err"])
    tables = {t: [] for t in timers}
    picks, host = [], {}
    for group in groups:
        for label, M, K, N in SHAPES[group]:
            fns = _fns(M, K, N, with_tk=not tk_missing)
            # Autotune first (outside any timing or graph capture), recording each Triton pick.
            picks.append((label, [_tuned_pick(fns[c]) for c in TRITON_COLUMNS]))
            flops = 2.0 * M * N * K
            for timer in timers:
                row = []
                for name in columns:
                    if timer == "graph":
                        ms = triton.testing.do_bench_cudagraph(fns[name], rep=20, return_mode="median")
                    else:
                        ms = triton.testing.do_bench(fns[name], warmup=args.warmup, rep=args.rep,
                                                     return_mode="median")
                    row.append(flops / (ms * 1e-3) / 1e12)
                tables[timer].append((label, M, K, N, row))
            pairs = [("triton rw promo", "scaled_mm rw promo")]
            if not tk_missing:
                pairs += [("tk rw fast", "scaled_mm rw fast"), ("tk tw fast", "scaled_mm tw fast")]
            err = []
            for ours, theirs in pairs:
                ref = fns[theirs]().float()
                err.append(((fns[ours]().float() - ref).abs().max() / ref.abs().max()).item())
            for timer in timers:
                tables[timer][-1] = (*tables[timer][-1], err)
            if label == "8B wk/wv":
                host = {c: _host_us(fns[c]) for c in ("scaled_mm rw fast", "triton rw fast", *TK_COLUMNS)
                        if c in fns}
            print(f"  done {label}", flush=True)
    for timer in timers:
        what = ("GPU time: CUDA graph replay (do_bench_cudagraph)" if timer == "graph" else
                "do_bench: CUDA events per call after an L2 flush (includes host time the GPU waits on)")
        print(f"\nTFLOP/s, {what}, median, bf16 output\n")
        print("| shape | M | K | N | " + " | ".join(columns + errs) + " |")
        print("|" + "---|" * (len(columns) + len(errs) + 4))
        for label, M, K, N, row, err in tables[timer]:
            cells = " | ".join([f"{t:,.0f}" for t in row] + [f"{e:.1e}" for e in err])
            print(f"| {label} | {M} | {K} | {N} | {cells} |")
    print("\nTriton autotuner picks (BLOCK_MxBLOCK_NxBLOCK_K[s: split epilogue]/warps/stages):\n")
    print("| shape | " + " | ".join(TRITON_COLUMNS) + " |")
    print("|" + "---|" * (len(TRITON_COLUMNS) + 1))
    for label, row in picks:
        print(f"| {label} | " + " | ".join(row) + " |")
    if host:
        print("\nhost time per call at the 8B wk/wv shape (us): "
              + ", ".join(f"{k} {v:.1f}" for k, v in host.items()))
    return 0
