"""A/B of the TK kernels with the warpgroup index made provably warp-uniform (TK_UNI=1: a
__shfl_sync broadcast of threadIdx.x / 128, so nvcc keeps the shared-memory descriptor and ring-slot
arithmetic on the uniform datapath) against the committed build (TK_UNI=0), picked per launch and
interleaved round by round, beside cuDNN and torch._scaled_mm. Checks first that both give bitwise
the same outputs. Usage: python3 uni_ab.py [rounds] [attention,gemm]; AB_ENV / AB_LABEL name
another patch's variable and variant (default TK_UNI)."""
import os
import sys

import torch

from kernels.fp8 import reference as R
from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench  # do_bench median, warmup 25, rep 200
from kernels.thunderkittens.bench import cudnn_attention as cudnn

ATTN = {"anchor": (64, 8, 8192, True), "8b": (32, 8, 8192, True), "70b-tp8": (8, 1, 8192, True),
        "anchor-full": (64, 8, 8192, False)}
GEMM = {"8192^3": (8192, 8192, 8192), "8B w1/w3": (8192, 14336, 4096), "70B w2": (8192, 8192, 28672)}


AB_ENV = os.environ.get("AB_ENV", "TK_UNI")  # the variable a patch reads per launch (4e: TK_UNI)


def setv(v):
    os.environ[AB_ENV] = v


def attention(rounds, res):
    for name, (hq, hkv, s, causal) in ATTN.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        flops = 4.0 * hq * s * s * 128 / (2 if causal else 1)
        outs = {}
        for var in ("0", "1"):
            setv(var)
            o, lse = ops.attention_fwd(q, k, v, causal=causal)
            outs[var] = (o, lse, *ops.attention_bwd(do, q, k, v, o, lse, causal=causal))
        print(name, "bitwise equal (out, lse, dq, dk, dv):",
              [torch.equal(a, b) for a, b in zip(outs["0"], outs["1"])], flush=True)
        o, lse = outs["0"][:2]
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        for _ in range(rounds):
            for var in ("0", "1", "cudnn"):
                if var == "cudnn":
                    fn = lambda *a: cudnn(*a, causal)  # noqa: E731
                    bwd = None
                else:
                    setv(var)
                    fn = lambda *a: ops.attention(*a, causal=causal)  # noqa: E731
                    bwd = lambda: ops.attention_bwd(do, q, k, v, o, lse, causal=causal)  # noqa: E731
                with torch.no_grad():
                    f = bench(lambda: fn(q, k, v))
                    b = bench(bwd) if bwd else float("nan")
                fb = bench(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
                res.setdefault(("attention", name, var), []).append(
                    (flops / f / 1e9, 2.5 * flops / b / 1e9, 3.5 * flops / fb / 1e9))
        del q, k, v, do, leaves, outs, o, lse
        torch.cuda.empty_cache()


def gemm(rounds, res):
    for name, (m, n, k) in GEMM.items():
        g = torch.Generator(device="cuda").manual_seed(0)
        x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
        w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
        for scaling in ("rowwise", "tensorwise"):
            if scaling == "rowwise":
                (qx, sx), (qw, sw) = R.quantize_rowwise(x), R.quantize_rowwise(w)
                sw = sw.reshape(1, -1)
            else:
                (qx, sx), (qw, sw) = R.quantize_tensorwise(x), R.quantize_tensorwise(w)
            outs = {}
            for var in ("0", "1"):
                setv(var)
                outs[var] = ops.fp8_gemm_rowwise(qx, qw, sx, sw)
            print(name, scaling, "bitwise equal:", torch.equal(outs["0"], outs["1"]), flush=True)
            for _ in range(rounds):
                for var in ("0", "1", "cublas"):
                    if var == "cublas":
                        fn = lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16,  # noqa: E731
                                                      use_fast_accum=True)
                    else:
                        setv(var)
                        fn = lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw)  # noqa: E731
                    res.setdefault((f"gemm {scaling}", name, var), []).append(
                        (2.0 * m * n * k / bench(fn) / 1e9,))


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    which = sys.argv[2] if len(sys.argv) > 2 else "attention,gemm"
    res = {}
    if "attention" in which:
        attention(rounds, res)
    if "gemm" in which:
        gemm(rounds, res)
    label = {"0": "committed", "1": os.environ.get("AB_LABEL", "uniform warpgroup index"), "cudnn": "cuDNN",
             "cublas": "_scaled_mm fast accum"}
    print("\n| kernel | shape | variant | TFLOP/s by round (attention: forward / backward / forward+backward) |")
    print("|---|---|---|---|")
    for (kind, name, var), v in res.items():
        cells = " ".join("/".join(f"{x:.0f}" for x in t) for t in v)
        print(f"| {kind} | {name} | {label[var]} | {cells} |")


if __name__ == "__main__":
    main()
