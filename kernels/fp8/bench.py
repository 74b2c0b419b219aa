"""`python -m kernels.bench fp8_gemm`: Triton FP8 GEMM vs torch._scaled_mm vs bf16 matmul.

Shapes are (M tokens, K in, N out) of Llama-3 linears at 8192 tokens, plus 8192^3:
  8B:  wq/wo 4096->4096, wk/wv 4096->1024, w1/w3 4096->14336, w2 14336->4096
  70B: wq/wo 8192->8192, wk/wv 8192->1024, w1/w3 8192->28672, w2 28672->8192
TFLOP/s = 2 M N K / median time (triton.testing.do_bench) on random data; quantization is not
timed (GEMM only). "fast" columns use fast accumulation (no fp32 promotion) on both sides; "promo"
columns promote to fp32 every 128 of K (cuBLAS use_fast_accum=False; Triton max_num_imprecise_acc).
The last column is the max relative error of Triton rowwise against torch._scaled_mm rowwise.
"""

from __future__ import annotations

import argparse

import torch

SHAPES = {
    "square": [("8192^3", 8192, 8192, 8192)],
    "8b": [("8B wq/wo", 8192, 4096, 4096), ("8B wk/wv", 8192, 4096, 1024),
           ("8B w1/w3", 8192, 4096, 14336), ("8B w2", 8192, 14336, 4096)],
    "70b": [("70B wq/wo", 8192, 8192, 8192), ("70B wk/wv", 8192, 8192, 1024),
            ("70B w1/w3", 8192, 8192, 28672), ("70B w2", 8192, 28672, 8192)],
}
COLUMNS = ["bf16 mm", "scaled_mm tw fast", "triton tw fast", "scaled_mm rw fast", "triton rw fast",
           "scaled_mm rw promo", "triton rw promo"]


def _bench_shape(M: int, K: int, N: int, warmup: int, rep: int) -> tuple[list[float], float]:
    import triton.testing

    from kernels.fp8 import reference as R
    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm

    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).bfloat16()
    qx_t, sx_t = R.quantize_tensorwise(x)
    qw_t, sw_t = R.quantize_tensorwise(w)
    qx_r, sx_r = R.quantize_rowwise(x)
    qw_r, sw_r = R.quantize_rowwise(w)
    sw_r = sw_r.reshape(1, -1)
    bf16 = torch.bfloat16
    fns = {
        "bf16 mm": lambda: x @ w.t(),
        "scaled_mm tw fast": lambda: torch._scaled_mm(qx_t, qw_t.t(), sx_t, sw_t, out_dtype=bf16,
                                                      use_fast_accum=True),
        "triton tw fast": lambda: fp8_gemm(qx_t, qw_t.t(), sx_t, sw_t, bf16, True),
        "scaled_mm rw fast": lambda: torch._scaled_mm(qx_r, qw_r.t(), sx_r, sw_r, out_dtype=bf16,
                                                      use_fast_accum=True),
        "triton rw fast": lambda: fp8_gemm(qx_r, qw_r.t(), sx_r, sw_r, bf16, True),
        "scaled_mm rw promo": lambda: torch._scaled_mm(qx_r, qw_r.t(), sx_r, sw_r, out_dtype=bf16,
                                                       use_fast_accum=False),
        "triton rw promo": lambda: fp8_gemm(qx_r, qw_r.t(), sx_r, sw_r, bf16, False),
    }
    flops = 2.0 * M * N * K
    tflops = []
    for name in COLUMNS:
        ms = triton.testing.do_bench(fns[name], warmup=warmup, rep=rep, return_mode="median")
        tflops.append(flops / (ms * 1e-3) / 1e12)
    ref = fns["scaled_mm rw promo"]().float()
    err = ((fns["triton rw promo"]().float() - ref).abs().max() / ref.abs().max()).item()
    return tflops, err


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.bench fp8_gemm", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--shapes", default="square,8b,70b", help="comma list of: " + ", ".join(SHAPES))
    p.add_argument("--warmup", type=int, default=25, help="do_bench warm-up time (ms)")
    p.add_argument("--rep", type=int, default=100, help="do_bench measuring time (ms)")
    args = p.parse_args(argv)
    groups = [s.strip() for s in args.shapes.split(",") if s.strip()]
    bad = [s for s in groups if s not in SHAPES]
    if bad:
        p.error(f"--shapes: unknown {bad}; valid: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("kernels.bench fp8_gemm needs a CUDA GPU (sm_90+ for the Triton kernel); nothing to do on CPU")
        return 0
    import triton

    print(f"device: {torch.cuda.get_device_name()}  torch {torch.__version__}  triton {triton.__version__}")
    print("TFLOP/s (median of do_bench; 2*M*N*K / time), bf16 output\n")
    print("| shape | M | K | N | " + " | ".join(COLUMNS) + " | max rel err |")
    print("|" + "---|" * (len(COLUMNS) + 5))
    for group in groups:
        for label, M, K, N in SHAPES[group]:
            tflops, err = _bench_shape(M, K, N, args.warmup, args.rep)
            cells = " | ".join(f"{t:,.0f}" for t in tflops)
            print(f"| {label} | {M} | {K} | {N} | {cells} | {err:.1e} |", flush=True)
    return 0
