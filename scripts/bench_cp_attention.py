"""Context-parallel attention forward+backward against one-GPU full attention, as a markdown table.

    torchrun --nproc_per_node=2 scripts/bench_cp_attention.py --out docs/perf/cp_attention.md
    torchrun --nproc_per_node=2 scripts/bench_cp_attention.py --seq 32 --heads 4 --kv-heads 2 \
        --head-dim 16 --batch 2          # CPU (gloo, fp32): a smoke run, numbers meaningless

Every rank draws the same full-sequence q, k, v and output gradient (Llama-3 8B attention by
default: batch 1, seq 16384, 32 query / 8 KV heads, head dim 128, bf16, causal) and
  - times full attention on the whole sequence on its own device (SDPA's cuDNN backend on CUDA),
    the single-GPU baseline, and keeps its output and gradients;
  - times trainer.parallel.context.ContextParallelAttention on its load-balanced shard (chunks r and
    2cp-1-r) for each method (ring, allgather) and kernels.attention backend (sdpa with its cuDNN
    and FlashAttention-2 pairs, triton), and checks its output and dq/dk/dv against the matching
    rows of the baseline.
Times are the mean over --iters calls after --warmup, the slowest rank's (a CP step waits for it).
FLOPs count the causal half: forward 4 * B * Hq * D * S^2 / 2, forward+backward 3.5x that; per GPU
a CP rank does 1/cp of it, the baseline all of it. The last column is the largest error, relative
to the baseline's largest magnitude, over out/dq/dk/dv and ranks; the script fails (exit code 1)
when it exceeds 1e-4 in fp32 or 5e-2 in bf16/fp16.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from kernels.attention import sdpa  # noqa: E402
from trainer.parallel.context import (  # noqa: E402
    METHODS,
    ContextParallelAttention,
    load_balanced_index,
)

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
BACKENDS = ("sdpa", "triton", "reference")
TOLERANCE = {torch.float32: 1e-4, torch.bfloat16: 5e-2, torch.float16: 5e-2}


def _parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="torchrun --nproc_per_node=N scripts/bench_cp_attention.py")
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--seq", type=int, default=16384, help="full sequence length (all CP ranks)")
    p.add_argument("--heads", type=int, default=32, help="query heads")
    p.add_argument("--kv-heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=128)
    p.add_argument("--dtype", choices=list(DTYPES), default=None,
                   help="default bf16 on CUDA, fp32 on CPU")
    p.add_argument("--methods", default=",".join(METHODS))
    p.add_argument("--backends", default=None,
                   help=f"comma-separated subset of {BACKENDS}; default sdpa,triton on CUDA, sdpa "
                        "on CPU")
    p.add_argument("--sdpa-ops", default="cudnn,flash",
                   help="CUDA ops behind the sdpa pair to compare (cudnn, flash, auto)")
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=10)
    p.add_argument("--out", default=None, help="also write the report to this markdown file")
    args = p.parse_args(argv)
    for name, valid in (("methods", METHODS), ("backends", BACKENDS), ("sdpa_ops", sdpa.PAIR_OPS)):
        value = getattr(args, name)
        if value is None:
            continue
        items = [x for x in value.split(",") if x]
        bad = [x for x in items if x not in valid]
        if bad or not items:
            p.error(f"--{name.replace('_', '-')} {value!r}: valid items are {list(valid)}")
        setattr(args, name, items)
    return args


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _time_ms(fn, args, device: torch.device) -> float:
    """Mean ms per call over args.iters after args.warmup, the slowest rank's."""
    for _ in range(args.warmup):
        fn()
    _sync(device)
    dist.barrier()
    start = time.perf_counter()
    for _ in range(args.iters):
        fn()
    _sync(device)
    ms = torch.tensor([(time.perf_counter() - start) * 1e3 / args.iters], device=device)
    dist.all_reduce(ms, op=dist.ReduceOp.MAX)
    return float(ms.item())


def _full_attention(q, k, v):
    """The single-device baseline: SDPA on the whole sequence (cuDNN on CUDA), GQA unexpanded."""
    qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
    if q.is_cuda:
        from torch.nn.attention import SDPBackend, sdpa_kernel

        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    else:
        out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=True, enable_gqa=True)
    return out.transpose(1, 2)


def _tf(x: float) -> str:
    return f"{x:.0f}" if x >= 10 else f"{x:.2g}"


def _fwd_bwd(fn, leaves, dout):
    return torch.autograd.grad(fn(*leaves), leaves, dout)


def _max_rel_err(got: list[torch.Tensor], want: list[torch.Tensor], device) -> float:
    err = max(((g.float() - w.float()).abs().max() / w.float().abs().max().clamp_min(1e-30)).item()
              for g, w in zip(got, want))
    t = torch.tensor([err], device=device)
    dist.all_reduce(t, op=dist.ReduceOp.MAX)
    return float(t.item())


def _variants(args, device) -> list[tuple[str, str, str | None]]:
    """(method, backend, sdpa pair op or None) for every row to measure."""
    backends = args.backends or (["sdpa", "triton"] if device.type == "cuda" else ["sdpa"])
    rows = []
    for method in args.methods:
        for backend in backends:
            ops = args.sdpa_ops if backend == "sdpa" and device.type == "cuda" else [None]
            rows += [(method, backend, op) for op in ops]
    return rows


def _environment(device: torch.device, world: int) -> str:
    parts = [f"torch {torch.__version__}", f"python {platform.python_version()}"]
    try:
        import triton

        parts.append(f"triton {triton.__version__}")
    except ImportError:
        pass
    if device.type == "cuda":
        parts.insert(0, f"{world} x {torch.cuda.get_device_name(device)}")
        parts.append(f"cuDNN {torch.backends.cudnn.version()}")
    else:
        parts.insert(0, f"{world} CPU processes (gloo)")
    return ", ".join(parts)


def run(args: argparse.Namespace) -> int:
    rank, world = dist.get_rank(), dist.get_world_size()
    if torch.cuda.is_available():
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", rank)))
        torch.cuda.set_device(device)
    else:
        device = torch.device("cpu")
    dtype = DTYPES[args.dtype or ("bf16" if device.type == "cuda" else "fp32")]
    b, s, hq, hkv, d = args.batch, args.seq, args.heads, args.kv_heads, args.head_dim
    idx = load_balanced_index(s, world, rank, device=device)  # validates seq % (2 * world)
    gen = torch.Generator(device=device).manual_seed(0)  # the same full tensors on every rank
    q, k, v, do = (torch.randn(b, s, h, d, device=device, generator=gen).to(dtype)
                   for h in (hq, hkv, hkv, hq))
    fwd_flops = 4.0 * b * hq * d * s * s / 2

    lines = [f"# context-parallel attention: {_environment(device, world)}",
             f"command: torchrun --nproc_per_node={world} scripts/bench_cp_attention.py "
             f"{' '.join(sys.argv[1:])}",
             f"shape: batch {b}, seq {s} (cp {world}: {s // world} per rank), heads {hq}/{hkv}, "
             f"head dim {d}, {str(dtype).replace('torch.', '')}, causal; mean of {args.iters} "
             f"calls after {args.warmup}",
             "",
             "| variant | fwd ms | fwd TFLOP/s/GPU | fwd+bwd ms | fwd+bwd TFLOP/s/GPU | "
             "vs 1 GPU | max rel err |",
             "|---|---|---|---|---|---|---|"]

    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    with torch.no_grad():
        base_fwd = _time_ms(lambda: _full_attention(q, k, v), args, device)
    base_both = _time_ms(lambda: _fwd_bwd(_full_attention, leaves, do), args, device)
    with torch.no_grad():
        ref_out = _full_attention(q, k, v)[:, idx]
    ref_grads = [g[:, idx] for g in _fwd_bwd(_full_attention, leaves, do)]
    base_tf = 3.5 * fwd_flops / base_both / 1e9
    label = ("1 GPU, full sequence, SDPA cuDNN" if device.type == "cuda"
             else "1 process, full sequence, SDPA")
    lines.append(f"| {label} | {base_fwd:.3f} | {_tf(fwd_flops / base_fwd / 1e9)} | "
                 f"{base_both:.3f} | {_tf(base_tf)} | 1.00 | - |")

    failed = []
    ql, kl, vl, dol = (t[:, idx].contiguous() for t in (q, k, v, do))
    local = [t.detach().requires_grad_() for t in (ql, kl, vl)]
    for method, backend, op in _variants(args, device):
        name = f"cp {world} {method}, {backend}" + (f" ({op} pair)" if op else "")
        if op is not None:
            sdpa.set_cuda_pair_op(op)
        core = ContextParallelAttention(dist.group.WORLD, method, backend)
        try:
            with torch.no_grad():
                out = core(ql, kl, vl)
                fwd = _time_ms(lambda: core(ql, kl, vl), args, device)
            grads = _fwd_bwd(core, local, dol)
            both = _time_ms(lambda: _fwd_bwd(core, local, dol), args, device)
        except (RuntimeError, ValueError) as exc:  # a backend that cannot run here: say why
            lines.append(f"| {name} | n/a: {str(exc).splitlines()[0][:80]} | | | | | |")
            continue
        finally:
            sdpa.set_cuda_pair_op("auto")
        err = _max_rel_err([out, *grads], [ref_out, *ref_grads], device)
        tf = 3.5 * fwd_flops / world / both / 1e9
        lines.append(f"| {name} | {fwd:.3f} | {_tf(fwd_flops / world / fwd / 1e9)} | {both:.3f} | "
                     f"{_tf(tf)} | {tf / base_tf:.2f} | {err:.1e} |")
        if err > TOLERANCE[dtype]:
            failed.append(f"{name}: error {err:.1e} > {TOLERANCE[dtype]:.0e}")
    lines.append("")
    lines.append("vs 1 GPU: fwd+bwd TFLOP/s per GPU over the baseline's; 1.00 = perfect scaling.")
    lines += [f"FAILED {f}" for f in failed]
    if rank == 0:
        report = "\n".join(lines)
        print(report, flush=True)
        if args.out:
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            Path(args.out).write_text(report + "\n")
    return 1 if failed else 0


def main(argv: list[str] | None = None) -> int:
    args = _parse(argv)
    if "RANK" not in os.environ:
        print("run under torchrun, e.g. torchrun --nproc_per_node=2 scripts/bench_cp_attention.py",
              file=sys.stderr)
        return 2
    dist.init_process_group("nccl" if torch.cuda.is_available() else "gloo")
    try:
        rc = run(args)
        dist.barrier()  # no rank tears gloo down while another still talks to it
        return rc
    finally:
        dist.destroy_process_group()


if __name__ == "__main__":
    from trainer.train import run_and_leave

    # Without the interpreter's teardown, where a gloo thread aborted a rank after a complete run
    # (CI, 2026-12-01): leave() says why.
    run_and_leave(main)
