"""TK FP8 GEMM: tensorwise (one scale each) vs rowwise, and _scaled_mm, do_bench medians, 2 rounds."""
import torch, triton.testing
from kernels.fp8 import reference as R
from kernels.thunderkittens import ops
shapes = {"8192^3": (8192, 8192, 8192), "8B w1/w3": (8192, 14336, 4096), "70B w2": (8192, 8192, 28672),
          "8B wq fwd": (8192, 4096, 4096), "8B wk fwd": (8192, 1024, 4096)}
print("| shape | TK rowwise | TK tensorwise | _scaled_mm rowwise fast | _scaled_mm tensorwise fast | tw == rw bits |")
print("|---|---|---|---|---|---|")
for name, (m, n, k) in shapes.items():
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
    qx, sx = R.quantize_rowwise(x); qw, sw = R.quantize_rowwise(w); sw = sw.reshape(1, -1)
    tx, stx = R.quantize_tensorwise(x); tw, stw = R.quantize_tensorwise(w)
    fns = {"rw": lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw),
           "tw": lambda: ops.fp8_gemm_rowwise(tx, tw, stx, stw),
           "cb_rw": lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True),
           "cb_tw": lambda: torch._scaled_mm(tx, tw.t(), stx, stw, out_dtype=torch.bfloat16, use_fast_accum=True)}
    same = torch.equal(fns["tw"](), ops.fp8_gemm_rowwise(tx, tw, stx.reshape(1, 1).expand(m, 1), stw.reshape(1, 1).expand(1, n)))
    best = {}
    for r in range(2):
        for key, fn in fns.items():
            ms = triton.testing.do_bench(fn, warmup=25, rep=150, return_mode="median")
            best.setdefault(key, []).append(2.0 * m * n * k / ms / 1e9)
    cell = lambda key: " / ".join(f"{v:,.0f}" for v in best[key])
    print(f"| {name} | {cell('rw')} | {cell('tw')} | {cell('cb_rw')} | {cell('cb_tw')} | {same} |", flush=True)
