"""`python -m kernels.bench attention`: Triton attention vs SDPA's cuDNN and flash backends.

Shapes (bf16, causal, batch 1, seq 8192, head dim 128):
  anchor   Hq 64 / Hkv 8 (ANCHORS.md section 2; also Llama-3 70B without TP)
  8b       Hq 32 / Hkv 8 (Llama-3 8B)
  70b-tp8  Hq 8 / Hkv 1  (Llama-3 70B under tensor parallel 8)
  docs     the anchor shape packed with documents of 512 tokens (triton vs SDPA with a bool mask)
FLOPs: forward = 4 * B * Hq * S^2 * D / 2 (causal half; with documents the sum of L^2 / 2 over
documents), forward+backward = 3.5 x forward. Times are the median of triton.testing.do_bench.
`--sweep` also times every tile config of each Triton kernel on the anchor shape.
"""

from __future__ import annotations

import argparse
import platform
import sys

import torch
import torch.nn.functional as F

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


def _measure(fn, q, k, v, do) -> tuple[float, float]:
    """(forward ms, forward+backward ms)."""
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.no_grad():
        fwd = _time(lambda: fn(q, k, v))
    both = _time(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
    return fwd, both


def _implementations(doc_len: int, doc_ids, mask):
    from torch.nn.attention import SDPBackend

    from kernels.attention import attention

    def tri(q, k, v):
        return attention(q, k, v, causal=True, doc_ids=doc_ids, backend="triton")

    # Variant rows set triton_op.DQ_MODE = "atomic" / FWD_TMA = True around their measurement.
    impls = {"triton": tri, "triton (atomic dQ)": tri, "triton (TMA fwd)": tri,
             "triton (TMA fwd, atomic dQ)": tri}
    if doc_len:
        # SDPA's efficient backend takes a mask but no enable_gqa, so K/V are expanded.
        efficient = _sdpa(SDPBackend.EFFICIENT_ATTENTION, expand=True)
        impls["sdpa efficient, bool mask (K/V expanded)"] = lambda q, k, v: efficient(q, k, v, mask)
        return impls
    for name, backend in [("sdpa cudnn", SDPBackend.CUDNN_ATTENTION),
                          ("sdpa flash", SDPBackend.FLASH_ATTENTION)]:
        native, expanded = _sdpa(backend, expand=False), _sdpa(backend, expand=True)
        impls[name] = lambda q, k, v, f=native: f(q, k, v, None)
        impls[name + " (K/V expanded)"] = lambda q, k, v, f=expanded: f(q, k, v, None)
    return impls


def _bench_shape(name: str, rows: list[str], shape: tuple, device: str = "cuda",
                 dtype: torch.dtype = torch.bfloat16) -> None:
    from kernels.attention import attention, triton_op

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
    for impl, fn in _implementations(doc_len, doc_ids, mask).items():
        triton_op.DQ_MODE = "atomic" if "atomic" in impl else "recompute"
        triton_op.FWD_TMA = "TMA" in impl
        try:
            with torch.no_grad():
                err = (fn(q, k, v).float() - ref.float()).abs().max().item()
            fwd, both = _measure(fn, q, k, v, do)
        except RuntimeError as e:  # a backend that cannot run this shape: say why, keep going
            rows.append(f"| {name} | {impl} | n/a: {str(e).splitlines()[0][:60]} | | | | |")
            torch.cuda.empty_cache()
            continue
        finally:
            triton_op.DQ_MODE = "recompute"
            triton_op.FWD_TMA = False
        tf_f, tf_b = flops / fwd / 1e9, 3.5 * flops / both / 1e9
        rows.append(f"| {name} | {impl} | {fwd:.3f} | {tf_f:.0f} | {both:.3f} | {tf_b:.0f} "
                    f"({100 * tf_b / MATMUL_CEILING:.0f}%) | {err:.1e} |")


def _sweep(rows: list[str], shape: tuple, device: str = "cuda",
           dtype: torch.dtype = torch.bfloat16) -> None:
    """Each tile config of each Triton kernel pinned in turn (the others autotuned)."""
    from kernels.attention import attention_bwd, attention_fwd, triton_bwd, triton_fwd, triton_op

    b, hq, hkv, s, d, _ = shape
    q, k, v, do = (torch.randn(b, s, h, d, device=device).to(dtype) for h in (hq, hkv, hkv, hq))
    flops = _flops_fwd(b, hq, s, d, 0)
    out, lse = attention_fwd(q, k, v, causal=True, backend="triton")
    kernels = [("fwd", triton_fwd.FWD_CONFIGS, 1.0, ""),
               ("fwd", triton_fwd.FWD_CONFIGS, 1.0, "TMA"),
               ("dkdv", triton_bwd.DKDV_CONFIGS, 2.5, ""),
               ("dkdv", triton_bwd.DKDV_CONFIGS, 2.5, "atomic dQ"),
               ("dq", triton_bwd.DQ_CONFIGS, 2.5, "")]
    for name, configs, mult, variant in kernels:
        label = name + (f" ({variant})" if variant else "")
        for c in configs:
            key = (c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
            triton_op.CONFIG_OVERRIDE[name] = key
            triton_op.DQ_MODE = "atomic" if variant == "atomic dQ" else "recompute"
            triton_op.FWD_TMA = variant == "TMA"
            try:
                if name == "fwd":
                    ms = _time(lambda: attention_fwd(q, k, v, causal=True, backend="triton"))
                else:
                    ms = _time(lambda: attention_bwd(do, q, k, v, out, lse, causal=True,
                                                     backend="triton"))
                rows.append(f"| {label} | {key} | {ms:.3f} | {mult * flops / ms / 1e9:.0f} |")
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: report, go on
                rows.append(f"| {label} | {key} | n/a: {type(e).__name__}: {str(e)[:50]} | |")
            finally:
                triton_op.CONFIG_OVERRIDE.pop(name, None)
                triton_op.DQ_MODE = "recompute"
                triton_op.FWD_TMA = False


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernels.bench attention")
    parser.add_argument("--shapes", default="anchor,8b,70b-tp8,docs",
                        help=f"comma-separated subset of {','.join(SHAPES)}")
    parser.add_argument("--sweep", action="store_true", help="also time every Triton tile config")
    args = parser.parse_args(argv)
    shapes = [s for s in args.shapes.split(",") if s]
    bad = [s for s in shapes if s not in SHAPES]
    if bad:
        parser.error(f"unknown shape(s) {bad}; valid: {', '.join(SHAPES)}")
    if not torch.cuda.is_available():
        print("kernels.attention.bench needs CUDA (an H100/H200); nothing to measure on CPU.")
        return 0
    import triton

    from kernels.attention import triton_bwd, triton_fwd

    print(f"# attention: {torch.cuda.get_device_name()}, torch {torch.__version__}, "
          f"triton {triton.__version__}, python {platform.python_version()}")
    print(f"command: python -m kernels.bench attention {' '.join(argv or sys.argv[2:])}\n")
    rows = ["| shape | implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | "
            "fwd+bwd TFLOP/s (% of 751 matmul) | max abs diff vs triton |",
            "|---|---|---|---|---|---|---|"]
    for name in shapes:
        _bench_shape(name, rows, SHAPES[name])
    print("\n".join(rows))
    print("\nautotuned configs (BLOCK_M, BLOCK_N, warps, stages) per key:")
    tuned_kernels = [("fwd", triton_fwd.attn_fwd_tuned), ("dkdv", triton_bwd.attn_bwd_dkdv_tuned),
                     ("dq", triton_bwd.attn_bwd_dq_tuned)]
    for label, tuned in tuned_kernels:
        for key, cfg in getattr(tuned, "cache", {}).items():
            print(f"  {label} {key}: {cfg}")
    if args.sweep:
        rows = ["| pinned kernel | (BLOCK_M, BLOCK_N, warps, stages) | ms (fwd, or whole bwd) "
                "| TFLOP/s |", "|---|---|---|---|"]
        _sweep(rows, SHAPES["anchor"])
        print("\n" + "\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
