"""`python -m kernels.bench attention`: Triton and ThunderKittens attention vs SDPA's cuDNN and
flash backends.

Shapes (bf16, causal, batch 1, seq 8192, head dim 128):
  anchor   Hq 64 / Hkv 8 (ANCHORS.md section 2; also Llama-3 70B without TP)
  8b       Hq 32 / Hkv 8 (Llama-3 8B)
  70b-tp8  Hq 8 / Hkv 1  (Llama-3 70B under tensor parallel 8)
  docs     the anchor shape packed with documents of 512 tokens (triton vs SDPA with a bool mask)
FLOPs: forward = 4 * B * Hq * S^2 * D / 2 (causal half; with documents the sum of L^2 / 2 over
documents), forward+backward = 3.5 x forward. Times are the median of triton.testing.do_bench.
Triton rows: the defaults (autotuned) and alternative triton_launch.SETTINGS (TRITON_VARIANTS,
autotuned). `--sweep` first runs kernels/attention/bench_sweep.py (each variant and tile, kernel by
kernel); the alternative rows are then the fastest combination per dQ mode, its tiles pinned.
ThunderKittens row: when THUNDERKITTENS_ROOT points at a ThunderKittens clone and the extension
builds (kernels/thunderkittens/build.py), except for "docs" (the TK kernels take no document
masks); otherwise one line says why it is absent. `--cooldown S` leaves the GPU idle S seconds
before each row's measurement: the kernels run at the H200's 700 W limit, and one row's heat and
clock state otherwise carries into the next (docs/benchmarks.md sections 4i, 4j).
"""

from __future__ import annotations

import argparse
import platform
import sys
import time

import torch
import torch.nn.functional as F

from kernels.thunderkittens.build import unavailable_reason

SHAPES = {  # name -> (B, Hq, Hkv, S, D, document length or 0)
    "anchor": (1, 64, 8, 8192, 128, 0),
    "8b": (1, 32, 8, 8192, 128, 0),
    "70b-tp8": (1, 8, 1, 8192, 128, 0),
    "docs": (1, 64, 8, 8192, 128, 512),
}
MATMUL_CEILING = 751.0  # bf16 TFLOP/s measured on H200 (ANCHORS.md section 1)


def _flops_fwd(b: int, h: int, s: int, d: int, doc_len: int) -> float:
    if doc_len:
        n_full, rest = divmod(s, doc_len)
        pairs = (n_full * doc_len**2 + rest**2) / 2
    else:
        pairs = s * s / 2
    return 4.0 * b * h * pairs * d


def _sdpa(backend, expand: bool):
    """SDPA with one backend forced; expand=True repeats K/V instead of enable_gqa."""
    from torch.nn.attention import sdpa_kernel

    def fn(q, k, v, mask):
        qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        g = q.shape[2] // k.shape[2]
        if expand and g > 1:
            kt, vt = kt.repeat_interleave(g, 1), vt.repeat_interleave(g, 1)
        with sdpa_kernel(backend):
            out = F.scaled_dot_product_attention(
                qt, kt, vt, attn_mask=mask, is_causal=mask is None,
                enable_gqa=not expand and g > 1,
            )
        return out.transpose(1, 2)

    return fn


def _time(fn) -> float:
    import triton.testing

    return float(triton.testing.do_bench(fn, warmup=25, rep=200, return_mode="median"))


def _measure(fn, q, k, v, do, cooldown: float = 0.0) -> tuple[float, float]:
    """(forward ms, forward+backward ms), after `cooldown` seconds of idle GPU."""
    if cooldown > 0:
        time.sleep(cooldown)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.no_grad():
        fwd = _time(lambda: fn(q, k, v))
    both = _time(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
    return fwd, both


# Alternative Triton rows without a sweep (autotuned): label -> triton_launch.SETTINGS fields.
TRITON_VARIANTS = {
    "triton (atomic dQ)": dict(dq_mode="atomic", dkdv_heads_inner=True),
    "triton (tma_atomic dQ, TMA bwd)": dict(dq_mode="tma_atomic", dkdv_heads_inner=True,
                                            dkdv_tma=True),
    "triton (recompute dQ, TMA bwd)": dict(dkdv_heads_inner=True, dkdv_tma=True, dq_tma=True),
}


def _implementations(doc_len: int, doc_ids, mask, variants: dict[str, dict], with_tk: bool = False):
    """label -> (fn(q, k, v), triton_launch.SETTINGS fields, or None for an SDPA or TK row)."""
    from torch.nn.attention import SDPBackend

    from kernels.attention import attention

    def tri(q, k, v):
        return attention(q, k, v, causal=True, doc_ids=doc_ids, backend="triton")

    impls = {"triton (defaults)": (tri, {})}
    impls.update({label: (tri, fields) for label, fields in variants.items()})
    if doc_len:
        # SDPA's efficient backend takes a mask but no enable_gqa, so K/V are expanded.
        efficient = _sdpa(SDPBackend.EFFICIENT_ATTENTION, expand=True)
        impls["sdpa efficient, bool mask (K/V expanded)"] = (
            lambda q, k, v: efficient(q, k, v, mask), None)
        return impls
    for name, backend in [("sdpa cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa flash", SDPBackend.FLASH_ATTENTION)]:
        native, expanded = _sdpa(backend, expand=False), _sdpa(backend, expand=True)
        impls[name] = (lambda q, k, v, f=native: f(q, k, v, None), None)
        impls[name + " (K/V expanded)"] = (lambda q, k, v, f=expanded: f(q, k, v, None), None)
    if with_tk:
        impls["thunderkittens"] = (
            lambda q, k, v: attention(q, k, v, causal=True, backend="thunderkittens"), None)
    return impls


def _bench_shape(name: str, rows: list[str], shape: tuple, device: str = "cuda",
                 dtype: torch.dtype = torch.bfloat16, variants: dict[str, dict] | None = None,
                 out=None, with_tk: bool = False, cooldown: float = 0.0) -> None:
    """Append the table rows of one shape to `rows`; out(row) also prints each as it completes.
    with_tk adds the ThunderKittens row; cooldown: idle seconds before each row's timing."""
    from kernels.attention import attention, triton_launch

    variants = TRITON_VARIANTS if variants is None else variants
    b, hq, hkv, s, d, doc_len = shape
    g = torch.Generator(device=device).manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device=device, generator=g).to(dtype)
                   for h in (hq, hkv, hkv, hq))
    doc_ids = mask = None
    if doc_len:
        doc_ids = (torch.arange(s, device=device) // doc_len).to(torch.int32).expand(b, s)
        same = doc_ids[:, :, None] == doc_ids[:, None, :]
        mask = (same & torch.ones(s, s, dtype=torch.bool, device=device).tril()).unsqueeze(1)
    flops = _flops_fwd(b, hq, s, d, doc_len)
    with torch.no_grad():
        ref = attention(q, k, v, causal=True, doc_ids=doc_ids, backend="triton")
    for impl, (fn, fields) in _implementations(doc_len, doc_ids, mask, variants, with_tk).items():
        try:
            with triton_launch.settings(**(fields or {})):
                with torch.no_grad():
                    err = (fn(q, k, v).float() - ref.float()).abs().max().item()
                fwd, both = _measure(fn, q, k, v, do, cooldown)
        except (RuntimeError, ValueError) as e:  # a backend that cannot run this: say why, go on
            row = f"| {name} | {impl} | n/a: {str(e).splitlines()[0][:120]} | | | | |"
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
        else:
            tf_f, tf_b = flops / fwd / 1e9, 3.5 * flops / both / 1e9
            row = (f"| {name} | {impl} | {fwd:.3f} | {tf_f:.0f} | {both:.3f} | {tf_b:.0f} "
                   f"({100 * tf_b / MATMUL_CEILING:.0f}%) | {err:.1e} |")
        rows.append(row)
        if out is not None:
            out(row)


def _print(line: str) -> None:
    print(line, flush=True)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench attention")
    parser.add_argument("--shapes", default="anchor,8b,70b-tp8,docs",
                        help=f"comma-separated subset of {','.join(SHAPES)}")
    parser.add_argument("--sweep", action="store_true",
                        help="first time each Triton variant and tile kernel by kernel "
                             "(kernels/attention/bench_sweep.py); the table then compares the "
                             "fastest combination per dQ mode")
    parser.add_argument("--budget-s", type=float, default=200.0,
                        help="sweep entries that would start after this many seconds are skipped")
    parser.add_argument("--cooldown", type=float, default=0.0,
                        help="seconds the GPU stays idle before each row's measurement, so one "
                             "implementation's heat and clock state do not carry into the next")
    args = parser.parse_args(argv)
    if args.cooldown < 0:
        parser.error(f"--cooldown must be >= 0 seconds, got {args.cooldown}")
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        parser.error(f"unknown shape(s) {bad}; valid: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("kernels.attention.bench needs CUDA (an H100/H200); nothing to measure on CPU.")
        # Status 2, not 0: a run that measured nothing must not pass for a finished benchmark
        # in a script or a sweep that checks the exit status.
        return 2
    import triton

    from kernels.attention import bench_sweep, triton_bwd, triton_fwd, triton_launch

    start = time.perf_counter()
    _print(f"# attention: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
           f"triton {triton.__version__}, python {platform.python_version()}")
    _print(f"command: python -m kernels.bench attention {' '.join(argv or sys.argv[2:])}")
    _print(f"defaults: {triton_launch.SETTINGS}")
    tk_missing = unavailable_reason()
    if tk_missing:
        _print(f"ThunderKittens row skipped: {tk_missing}")
    variants = None
    if args.sweep:
        combos = bench_sweep.run(SHAPES["anchor"], SHAPES["70b-tp8"], args.budget_s, out=_print)
        variants = {f"triton best {mode} (sweep tiles)": fields for mode, fields in combos.items()}
    _print("\n## table\n")
    rows = ["| shape | implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | "
            "fwd+bwd TFLOP/s (% of 751 matmul) | max abs diff vs triton |",
            "|---|---|---|---|---|---|---|"]
    for row in rows:
        _print(row)
    for name in shapes:
        _bench_shape(name, rows, SHAPES[name], variants=variants, out=_print,
                     with_tk=not tk_missing, cooldown=args.cooldown)
    _print("\nautotuned configs (BLOCK_M, BLOCK_N, warps, stages) per key:")
    tuned_kernels = [("fwd", triton_fwd.attn_fwd_tuned), ("fwd TMA", triton_fwd.attn_fwd_tma_tuned),
                     ("dkdv", triton_bwd.attn_bwd_dkdv_tuned), ("dq", triton_bwd.attn_bwd_dq_tuned)]
    for label, tuned in tuned_kernels:
        for key, cfg in getattr(tuned, "cache", {}).items():
            _print(f"  {label} {key}: {cfg}")
    _print(f"\n(total {time.perf_counter() - start:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
