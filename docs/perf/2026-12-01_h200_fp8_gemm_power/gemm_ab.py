"""A/B of the TK FP8 GEMM variants (TITANKIT_TK_GEMM_VARIANT, read per call by the patched kernel) against
_scaled_mm fast accumulation, interleaved in one process; prints wall-clock windows for the
nvidia-smi power/clock log."""
import os, sys, time, torch, triton.testing
from kernels.fp8 import reference as R
from kernels.thunderkittens import ops
shapes = {"8192^3": (8192, 8192, 8192), "8B w1/w3": (8192, 14336, 4096),
          "70B w2": (8192, 8192, 28672), "70B w1": (8192, 28672, 8192), "70B wq/wo": (8192, 8192, 8192)}
names = sys.argv[1].split(",") if len(sys.argv) > 1 else list(shapes)
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["head"]
print("| shape | impl | round | TFLOP/s | t0 | t1 | max diff vs head |")
for name in names:
    m, n, k = shapes[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
    qx, sx = R.quantize_rowwise(x); qw, sw = R.quantize_rowwise(w); sw = sw.reshape(1, -1)
    os.environ["TITANKIT_TK_GEMM_VARIANT"] = "head"
    ref = ops.fp8_gemm_rowwise(qx, qw, sx, sw).float()
    impls = [(f"tk {v}", v) for v in variants] + [("_scaled_mm", None)]
    for r in range(rounds):
        for impl, v in impls:
            if v is None:
                fn = lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
            else:
                os.environ["TITANKIT_TK_GEMM_VARIANT"] = v
                fn = lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw)
            d = (fn().float() - ref).abs().max().item()
            t0 = time.time()
            ms = triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median")
            t1 = time.time()
            print(f"| {name} | {impl} | {r} | {2.0 * m * n * k / ms / 1e9:.0f} | {t0:.2f} | {t1:.2f} | {d:.1e} |", flush=True)
