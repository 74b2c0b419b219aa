"""GEMM time of one Llama-3 8B layer in FP8 training (8192 tokens, tensorwise scales, bf16 out),
as trainer/float8.py calls kernels.fp8.scaled_mm: forward fast accumulation, dgrad/wgrad promoted
for torch (TK: always fast). Backends torch vs thunderkittens; do_bench and cudagraph medians."""
import sys, torch, triton.testing
from kernels import fp8
from kernels.fp8 import reference as R
T = 8192
LIN = {"wq/wo": (4096, 4096, 2), "wk/wv": (4096, 1024, 2), "w1/w3": (4096, 14336, 2), "w2": (14336, 4096, 1)}
rows = []
for lname, (din, dout, cnt) in LIN.items():
    for role, (M, K, N), fast in (("fwd", (T, din, dout), True), ("dgrad", (T, dout, din), False),
                                  ("wgrad", (dout, T, din), False)):
        g = torch.Generator(device="cuda").manual_seed(0)
        a = torch.randn(M, K, device="cuda", generator=g).bfloat16()
        b = torch.randn(N, K, device="cuda", generator=g).bfloat16()
        qa, sa = R.quantize_tensorwise(a); qb, sb = R.quantize_tensorwise(b)
        res = {}
        for be, f in (("torch", fast), ("torch fast", True), ("thunderkittens", True)):
            bk = "torch" if be.startswith("torch") else be
            fn = lambda: fp8.scaled_mm(qa, qb.t(), sa, sb, torch.bfloat16, f, bk)
            fn(); torch.cuda.synchronize()
            ev = triton.testing.do_bench(fn, warmup=25, rep=100, return_mode="median")
            gr = triton.testing.do_bench_cudagraph(fn, rep=30, return_mode="median")
            res[be] = (ev, gr)
        flops = 2.0 * M * N * K
        rows.append((lname, role, M, K, N, cnt, res, flops))
        print(f"done {lname} {role}", flush=True)
print("\n| linear | role | M | K | N | x | torch (as trained) ev/graph TFLOP/s | torch fast | TK | TK/torch graph |")
print("|---|---|---|---|---|---|---|---|---|---|")
tot = {}
for lname, role, M, K, N, cnt, res, flops in rows:
    cells = []
    for be in ("torch", "torch fast", "thunderkittens"):
        ev, gr = res[be]
        cells.append(f"{flops/ev/1e9:,.0f} / {flops/gr/1e9:,.0f}")
        for i, t in enumerate((ev, gr)):
            tot[(be, i)] = tot.get((be, i), 0.0) + cnt * t
    print(f"| {lname} | {role} | {M} | {K} | {N} | {cnt} | " + " | ".join(cells) +
          f" | {res['torch'][1] / res['thunderkittens'][1]:.3f} |")
print("\nper-layer GEMM ms (sum of x * median):")
for be in ("torch", "torch fast", "thunderkittens"):
    print(f"  {be}: do_bench {tot[(be, 0)]:.3f} ms, cudagraph {tot[(be, 1)]:.3f} ms")
