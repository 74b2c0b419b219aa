"""`python -m kernels.thunderkittens.bench`: the ThunderKittens kernels against their baselines.

Attention (bf16, causal, head dim 128): TK vs SDPA's cuDNN backend and our Triton kernel
(kernels.attention backend "triton"), forward and forward+backward, on
  anchor   B 1, Hq 64, Hkv 8, S 8192 (ANCHORS.md section 2)
  8b       B 1, Hq 32, Hkv 8, S 8192 (Llama-3 8B)
  70b-tp8  B 1, Hq 8,  Hkv 1, S 8192 (Llama-3 70B under tensor parallel 8)
FLOPs: forward = 4 B Hq S^2 D / 2 (the causal half), forward+backward = 3.5 x forward.
--deterministic adds a "thunderkittens deterministic" row: torch.use_deterministic_algorithms holds
through its forward and backward (the backward reads the mode when it runs), as under
run.deterministic.
FP8 GEMM (e4m3, bf16 out), rowwise and tensorwise scales: TK vs torch._scaled_mm with the same
scales (use_fast_accum=True, the same accumulation as TK's; and False), TFLOP/s = 2 M N K / time.
Times are medians of triton.testing.do_bench, then the median over --rounds rounds (each round
rotates the order of the implementations, --cooldown idles the GPU before each measurement; the
TFLOP/s of every round are listed too); each row also gives the max abs difference of the outputs
against the baseline named in the row (cuDNN SDPA, or _scaled_mm with promotion and the same
scales).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import statistics
import sys
import time

import torch
import torch.nn.functional as F


ATTN_SHAPES = {  # name -> (B, Hq, Hkv, S, D)
    "anchor": (1, 64, 8, 8192, 128),
    "8b": (1, 32, 8, 8192, 128),
    "70b-tp8": (1, 8, 1, 8192, 128),
}
GEMM_SHAPES = {  # name -> (M, N, K)
    "8192^3": (8192, 8192, 8192),
    "8B w1/w3": (8192, 14336, 4096),
    "70B wq/wo": (8192, 8192, 8192),
    "70B w2": (8192, 8192, 28672),
}


def _time(fn, warmup: int = 25, rep: int = 200) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=warmup, rep=rep, return_mode="median"))


def cudnn_attention(q, k, v, causal: bool = True):
    """SDPA's cuDNN backend on our (B, S, H, D) layout, GQA included: the baseline of every row."""
    from torch.nn.attention import SDPBackend, sdpa_kernel

    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal,
                                             enable_gqa=q.shape[2] != k.shape[2])
    return out.transpose(1, 2)


def round_orders(names: list[str], rounds: int) -> list[list[str]]:
    """The order of each round, rotated by one slot per round so that no implementation keeps a
    slot: on the power-limited H200 the same kernel measured 2-5% apart in two slots of one round
    (docs/benchmarks.md 4g)."""
    return [names[r % len(names):] + names[:r % len(names)] for r in range(rounds)] if names else []


def _rounds(measures: dict, rounds: int, failed: dict, cooldown: float = 0.0) -> dict[str, list]:
    """{name: [measures[name]() of every round]} over `rounds` rotated rounds, the GPU left idle
    for `cooldown` seconds before each measurement; a name whose measurement raises goes to
    `failed` with the first line of the error."""
    results = {name: [] for name in measures}
    for order in round_orders([n for n in measures if n not in failed], rounds):
        for name in order:
            if name in failed:
                continue
            if cooldown > 0:
                time.sleep(cooldown)
            try:
                results[name].append(measures[name]())
            except (RuntimeError, ValueError) as e:  # a backend that cannot run here: say why
                failed[name] = str(e).splitlines()[0][:80]
    return results


def _by_round(flop: float, ms: list[float]) -> str:
    return ", ".join(f"{flop / t / 1e9:.0f}" for t in ms)


# Rows timed with torch.use_deterministic_algorithms on for the whole forward+backward.
DETERMINISTIC = {"thunderkittens deterministic"}


@contextlib.contextmanager
def deterministic_mode(on: bool):
    """torch.use_deterministic_algorithms(on) inside, the previous mode restored after."""
    before = (torch.are_deterministic_algorithms_enabled(),
              torch.is_deterministic_algorithms_warn_only_enabled())
    torch.use_deterministic_algorithms(on)
    try:
        yield
    finally:
        torch.use_deterministic_algorithms(before[0], warn_only=before[1])


def _attention_impls(deterministic: bool = False) -> dict:
    from kernels.attention import attention
    from kernels.thunderkittens import ops

    tk = lambda q, k, v: ops.attention(q, k, v, causal=True)  # noqa: E731
    impls = {
        "thunderkittens": tk,
        "sdpa cudnn": cudnn_attention,
        "triton": lambda q, k, v: attention(q, k, v, causal=True, backend="triton"),
    }
    if deterministic:
        impls["thunderkittens deterministic"] = tk  # measured under deterministic_mode(True)
    return impls


def attention_rows(name: str, shape: tuple, rounds: int = 1, device: str = "cuda",
                   cooldown: float = 0.0, deterministic: bool = False) -> list[str]:
    """Markdown rows (shape, implementation, fwd ms, fwd TFLOP/s, fwd+bwd ms, TFLOP/s, fwd+bwd
    TFLOP/s by round, diff); ms are medians over the rounds. deterministic adds the TK row timed
    in deterministic mode."""
    b, hq, hkv, s, d = shape
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device=device, generator=g).bfloat16()
                   for h in (hq, hkv, hkv, hq))
    flops = 4.0 * b * hq * s * s * d / 2
    impls = _attention_impls(deterministic)
    with torch.no_grad():
        ref = impls["sdpa cudnn"](q, k, v).float()
    errs, failed, measures = {}, {}, {}
    for impl, fn in impls.items():
        try:
            with torch.no_grad():
                errs[impl] = (fn(q, k, v).float() - ref).abs().max().item()
        except (RuntimeError, ValueError) as e:  # a backend that cannot run here: say why
            failed[impl] = str(e).splitlines()[0][:80]
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def measure(fn=fn, leaves=leaves, det=impl in DETERMINISTIC):
            with deterministic_mode(det):
                with torch.no_grad():
                    fwd = _time(lambda: fn(q, k, v))
                return fwd, _time(lambda: torch.autograd.grad(fn(*leaves), leaves, do))

        measures[impl] = measure
    pairs = _rounds(measures, rounds, failed, cooldown)  # (fwd ms, fwd+bwd ms) per round
    rows = []
    for impl in impls:
        if impl in failed:
            rows.append(f"| {name} | {impl} | n/a: {failed[impl]} | | | | | |")
            continue
        fwd = statistics.median([t[0] for t in pairs[impl]])
        both_ms = [t[1] for t in pairs[impl]]
        both = statistics.median(both_ms)
        rows.append(f"| {name} | {impl} | {fwd:.3f} | {flops / fwd / 1e9:.0f} | {both:.3f} | "
                    f"{3.5 * flops / both / 1e9:.0f} | {_by_round(3.5 * flops, both_ms)} | "
                    f"{errs[impl]:.1e} |")
    return rows


def _quantized(x: torch.Tensor, w: torch.Tensor, scaling: str) -> tuple:
    """(qx, qw, sx, sw) with _scaled_mm's scale shapes: (M, 1) and (1, N) rowwise, scalars tensorwise."""
    from kernels.fp8 import reference as R

    if scaling == "tensorwise":
        (qx, sx), (qw, sw) = R.quantize_tensorwise(x), R.quantize_tensorwise(w)
        return qx, qw, sx, sw
    (qx, sx), (qw, sw) = R.quantize_rowwise(x), R.quantize_rowwise(w)
    return qx, qw, sx, sw.reshape(1, -1)


def gemm_rows(name: str, m: int, n: int, k: int, rounds: int = 1,
              device: str = "cuda", cooldown: float = 0.0) -> list[str]:
    """Markdown rows (shape, implementation, ms, TFLOP/s, TFLOP/s by round, max abs diff vs
    _scaled_mm promoted), rowwise then tensorwise scales; each scaling's rows are compared with its
    own promoted result; ms are medians over the rounds."""
    from kernels.thunderkittens import ops

    g = torch.Generator(device=device).manual_seed(0)
    x = torch.randn(m, k, device=device, generator=g).bfloat16()
    w = (torch.randn(n, k, device=device, generator=g) * 0.02).bfloat16()
    flop = 2.0 * m * n * k
    rows = []
    for scaling in ("rowwise", "tensorwise"):
        qx, qw, sx, sw = _quantized(x, w, scaling)
        fns = {  # the TK op picks its tensorwise kernel from the one-element scales
            "thunderkittens": lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw),
            "_scaled_mm fast accum": lambda: torch._scaled_mm(qx, qw.t(), sx, sw,
                                                              out_dtype=torch.bfloat16,
                                                              use_fast_accum=True),
            "_scaled_mm promoted": lambda: torch._scaled_mm(qx, qw.t(), sx, sw,
                                                            out_dtype=torch.bfloat16,
                                                            use_fast_accum=False),
        }
        ref = fns["_scaled_mm promoted"]().float()
        errs, failed = {}, {}
        for impl, fn in fns.items():
            try:
                errs[impl] = (fn().float() - ref).abs().max().item()
            except (RuntimeError, ValueError) as e:
                failed[impl] = str(e).splitlines()[0][:80]
        times = _rounds({impl: (lambda fn=fn: _time(fn)) for impl, fn in fns.items()}, rounds,
                        failed, cooldown)
        for impl in fns:
            label = f"{name} | {impl} {scaling}"
            if impl in failed:
                rows.append(f"| {label} | n/a: {failed[impl]} | | | |")
                continue
            ms = statistics.median(times[impl])
            rows.append(f"| {label} | {ms:.3f} | {flop / ms / 1e9:.0f} | "
                        f"{_by_round(flop, times[impl])} | {errs[impl]:.1e} |")
    return rows


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m kernels.thunderkittens.bench", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--attention", default="anchor",
                   help=f"comma list of {', '.join(ATTN_SHAPES)} (empty: none)")
    p.add_argument("--gemm", default="8192^3",
                   help=f"comma list of {', '.join(GEMM_SHAPES)} (empty: none)")
    p.add_argument("--rounds", type=int, default=3,
                   help="rounds per shape, the implementations' order rotated each round; the "
                        "tables give medians and every round's TFLOP/s (default 3)")
    p.add_argument("--cooldown", type=float, default=0.0,
                   help="seconds the GPU stays idle before each measurement, so that one "
                        "implementation's heat and clock state carry less into the next "
                        "(default 0)")
    p.add_argument("--deterministic", action="store_true",
                   help="add a TK attention row timed under torch.use_deterministic_algorithms "
                        "(its backward then adds its fp32 partials in a fixed order)")
    args = p.parse_args(argv)
    if args.rounds < 1:
        p.error(f"--rounds must be at least 1, got {args.rounds}")
    if args.cooldown < 0:
        p.error(f"--cooldown must be >= 0 seconds, got {args.cooldown}")
    attn = [s for s in args.attention.split(",") if s]
    gemm = [s for s in args.gemm.split(",") if s]
    bad = [s for s in attn if s not in ATTN_SHAPES] + [s for s in gemm if s not in GEMM_SHAPES]
    if bad:
        p.error(f"unknown shape(s) {bad}")
    if not torch.cuda.is_available():
        print("kernels.thunderkittens.bench needs an H100/H200; nothing to measure on CPU.")
        # Status 2, not 0: a run that measured nothing must not pass for a finished benchmark
        # in a script or a sweep that checks the exit status.
        return 2
    import triton

    print(f"# thunderkittens: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, python {platform.python_version()}")
    shown = sys.argv[1:] if argv is None else argv
    print(f"command: python -m kernels.thunderkittens.bench {' '.join(shown)}\n")
    if attn:
        rows = ["| shape | implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s "
                "| fwd+bwd TFLOP/s by round | max abs diff vs cuDNN (fwd) |",
                "|---|---|---|---|---|---|---|---|"]
        for name in attn:
            rows += attention_rows(name, ATTN_SHAPES[name], args.rounds,
                                   cooldown=args.cooldown, deterministic=args.deterministic)
        print("\n".join(rows) + "\n")
    if gemm:
        rows = ["| GEMM (M, N, K) | implementation | ms | TFLOP/s | TFLOP/s by round "
                "| max abs diff vs promoted |", "|---|---|---|---|---|---|"]
        for name in gemm:
            m, n, k = GEMM_SHAPES[name]
            rows += gemm_rows(f"{name} ({m}, {n}, {k})", m, n, k, args.rounds,
                              cooldown=args.cooldown)
        print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
