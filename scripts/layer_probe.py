"""Where one transformer block's time goes, without the trainer around it.

    python scripts/layer_probe.py --flavor 70B                     # one H200: ~1 min
    python scripts/layer_probe.py --flavor debug --seq 64 --iters 2 # CPU smoke run

Builds one Llama-3 block of the flavor (bf16 weights, no FSDP, compiled like the trainer's blocks
unless --no-compile), times forward+backward on (batch, seq, dim) inputs, then profiles two more
passes and splits their device time: GEMMs by operator and shape, each beside the same matmul timed
alone (bf16; skip with --no-lone), attention, and the other kernels by name. --float8 RECIPE runs
the block's Linears in FP8 through the trainer's conversion (the weights are quantized in every
forward, as in training). Set against the trainer's per-layer time (scripts/bench_train.py, two
depths of the same model), the gap is what the training step adds around the block: FSDP's casts
and copies, gradient reduction, the optimizer.

Variants (--variants): "base", the block as the model has it; "fused", wq|wk|wv and w1|w3 each run
as one GEMM on weights concatenated per call (the question being whether wider GEMMs run faster).
"""

from __future__ import annotations

import argparse
import dataclasses
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

import torch
import torch.nn.functional as F

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from kernels import BackendUnavailable  # noqa: E402
from kernels.thunderkittens.build import ThunderKittensUnavailable  # noqa: E402
from trainer.config.schema import Float8  # noqa: E402
from trainer.float8 import BACKENDS as FP8_BACKENDS, RECIPES as FP8_RECIPES, convert_to_float8_training  # noqa: E402
from trainer.float8 import validate_float8_config  # noqa: E402
from trainer.gpu_monitor import CLOCK_KEY, POWER_KEY, GpuSampler  # noqa: E402
from trainer.models.llama import TransformerBlock  # noqa: E402
from trainer.models.llama_flavors import LLAMA3_FLAVORS  # noqa: E402
from trainer.models.rope import apply_rope, rope_table  # noqa: E402
from trainer.profiling import load_trace, trace_kernels  # noqa: E402

sys.path.insert(0, str(ROOT / "scripts"))  # scripts/ is not a package: import by directory
from report_out import prepare_out, write_out  # noqa: E402

GEMM_OPS = ("aten::mm", "aten::addmm", "aten::_scaled_mm")
VARIANTS = ("base", "fused")


def fused_forward(block: TransformerBlock):
    """The block's forward with wq|wk|wv and w1|w3 each as one GEMM (weights concatenated per call:
    the copy is part of what this variant costs)."""
    att, ff = block.attention, block.feed_forward

    def attention(x, rope, doc_ids):
        b, s, _ = x.shape
        nq, nk = att.wq.weight.shape[0], att.wk.weight.shape[0]
        qkv = F.linear(x, torch.cat([att.wq.weight, att.wk.weight, att.wv.weight]))
        q, k, v = qkv.split([nq, nk, qkv.shape[-1] - nq - nk], dim=-1)
        q = q.reshape(b, s, -1, att.head_dim)
        k = k.reshape(b, s, -1, att.head_dim)
        v = v.reshape(b, s, -1, att.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        return att.wo(att.core(q, k, v, doc_ids).reshape(b, s, -1))

    def feed_forward(x):
        gate, up = F.linear(x, torch.cat([ff.w1.weight, ff.w3.weight])).chunk(2, dim=-1)
        return ff.w2(F.silu(gate) * up)

    def forward(x, rope, doc_ids):
        h = x + attention(block.attention_norm(x), rope, doc_ids)
        return h + feed_forward(block.ffn_norm(h))
    return forward


def mm_shape(name: str, dims) -> tuple[int, int, int] | None:
    """(M, K, N) of an aten::mm / addmm / _scaled_mm from the profiler's Input Dims."""
    try:
        a, b = (dims[1], dims[2]) if name == "aten::addmm" else (dims[0], dims[1])
        (m, k), (k2, n) = a, b
    except (TypeError, ValueError, IndexError):
        return None
    return (m, k, n) if k == k2 else None


def gemm_table(events: list[dict]) -> dict[tuple[int, int, int], list[float]]:
    """(M, K, N) -> [device us, calls] of the traced GEMMs. On CUDA a kernel is tied to the mm
    operator that launched it by the profiler's External id; on CPU the operator is the work."""
    ops = {}
    for e in events:
        if e.get("cat") == "cpu_op" and e.get("name") in GEMM_OPS:
            ops[e["args"].get("External id")] = mm_shape(e["name"], e["args"].get("Input Dims"))
    kernels = [e for e in events if e.get("cat") == "kernel" and "dur" in e]
    rows: dict[tuple[int, int, int], list[float]] = defaultdict(lambda: [0.0, 0])
    if kernels:
        for e in kernels:
            shape = ops.get(e.get("args", {}).get("External id"))
            if shape is not None:
                rows[shape][0] += e["dur"]
                rows[shape][1] += 1
    else:
        for e in events:
            if e.get("cat") == "cpu_op" and e.get("name") in GEMM_OPS and "dur" in e:
                shape = mm_shape(e["name"], e["args"].get("Input Dims"))
                if shape is not None:
                    rows[shape][0] += e["dur"]
                    rows[shape][1] += 1
    return dict(rows)


def rate(flop: float, ms: float) -> str:
    """TFLOP/s as a table cell (small CPU shapes run far below 1)."""
    tflops = flop / ms / 1e9
    return f"{tflops:.0f}" if tflops >= 10 else f"{tflops:.2g}"


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def time_ms(fn, device: torch.device, iters: int) -> list[float]:
    out = []
    for _ in range(iters):
        sync(device)
        t0 = time.perf_counter()
        fn()
        sync(device)
        out.append((time.perf_counter() - t0) * 1e3)
    return out


def lone_mm_ms(shape: tuple[int, int, int], device: torch.device, dtype: torch.dtype, reps: int) -> float:
    """The same (M, K, N) matmul alone, `reps` back to back (as the block runs them: no host wait in
    between), best of the two layouts of its second operand (cuBLAS picks different kernels for
    them; the trace does not say which layout the block used)."""
    m, k, n = shape
    a = torch.randn(m, k, device=device, dtype=dtype)
    best = float("inf")
    for b in (torch.randn(k, n, device=device, dtype=dtype), torch.randn(n, k, device=device, dtype=dtype).t()):
        for _ in range(2):
            torch.mm(a, b)

        def run():
            for _ in range(reps):
                torch.mm(a, b)
        best = min(best, min(time_ms(run, device, 2)) / reps)
    return best


@dataclasses.dataclass
class Result:
    variant: str
    times_ms: list[float]
    clock: dict[str, float]
    categories: dict[str, float]  # ms per pass
    gemms: dict[tuple[int, int, int], list[float]]  # shape -> [ms per pass, calls per pass]
    others: list[tuple[str, float, float]]  # (kernel, ms per pass, calls per pass), largest first


def float8_config(opts) -> Float8:
    """The trainer's [float8] section for --float8 and --float8-backend (every Linear of the block)."""
    return Float8(enable=True, recipe=opts.float8, backend=opts.float8_backend, filter_fqns=[])


def probe(variant: str, args, opts, device: torch.device) -> Result:
    torch.manual_seed(0)
    block = TransformerBlock(0, args).to(device=device, dtype=opts.dtype)
    with torch.no_grad():
        for p in block.parameters():
            p.normal_(0, 0.02) if p.dim() > 1 else p.fill_(1.0)
    if opts.float8 != "none":
        # The trainer's conversion (trainer/float8.py): every Linear of the block becomes a
        # Float8Linear; the weight is quantized inside each forward, as with FSDP in training.
        convert_to_float8_training(block, float8_config(opts))
    if variant == "fused":
        block.forward = fused_forward(block)
    if opts.compile:
        block.compile()
    rope = rope_table(args, device=device)[: opts.seq].unsqueeze(0)
    x = torch.randn(opts.batch, opts.seq, args.dim, device=device, dtype=opts.dtype, requires_grad=True)
    grad = torch.randn_like(x)

    def step():
        # Fresh gradients each pass, as in training (FSDP hands each micro-batch's gradients to its
        # reduce-scatter): accumulating into .grad would add bf16 adds the trainer does not run.
        block.zero_grad(set_to_none=True)
        x.grad = None
        block(x, rope, None).backward(grad)

    for _ in range(opts.warmup):
        step()
    sampler = GpuSampler.for_device(device, 0.02) if device.type == "cuda" else None
    times = time_ms(step, device, opts.iters)
    clock = sampler.take() if sampler else {}
    if sampler:
        sampler.close()
    passes = 2
    acts = [torch.profiler.ProfilerActivity.CPU] + (
        [torch.profiler.ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch.profiler.profile(activities=acts, record_shapes=True) as prof:
        for _ in range(passes):
            step()
        sync(device)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "trace.json"
        prof.export_chrome_trace(str(path))
        events = load_trace(path)["traceEvents"]
    kernels, _, _, _ = trace_kernels(events, [])
    cats: dict[str, float] = defaultdict(float)
    other: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
    for k in kernels:
        cats[k.category] += k.duration / 1e3 / passes
        if k.category not in ("GEMM", "attention"):
            other[k.name][0] += k.duration / 1e3 / passes
            other[k.name][1] += 1 / passes
    gemms = {s: [us / 1e3 / passes, n / passes] for s, (us, n) in gemm_table(events).items()}
    others = sorted(((n, ms, c) for n, (ms, c) in other.items()), key=lambda r: -r[1])
    return Result(variant, times, clock, dict(cats), gemms, others)


def report(res: Result, opts, device: torch.device) -> list[str]:
    med = statistics.median(res.times_ms)
    clock = (f"; SM clock {res.clock[CLOCK_KEY]:.0f} MHz, {res.clock[POWER_KEY]:.0f} W"
             if CLOCK_KEY in res.clock else "")
    out = [f"## {res.variant}: forward+backward {med:.2f} ms (median of {len(res.times_ms)}; "
           f"min {min(res.times_ms):.2f}, max {max(res.times_ms):.2f}){clock}", "",
           "| device time per pass | ms |", "|---|---|"]
    out += [f"| {c} | {ms:.2f} |" for c, ms in sorted(res.categories.items(), key=lambda kv: -kv[1])]
    out += ["", "| GEMM (M, K, N) | calls/pass | ms/pass | TFLOP/s | alone: ms/pass | alone: TFLOP/s |",
            "|---|---|---|---|---|---|"]
    in_block = alone = 0.0
    for shape, (ms, calls) in sorted(res.gemms.items(), key=lambda kv: -kv[1][0]):
        flop = 2 * shape[0] * shape[1] * shape[2] * calls
        in_block += ms
        cells = ["", ""]
        if opts.lone:
            lone = lone_mm_ms(shape, device, opts.dtype, opts.lone_reps) * calls
            alone += lone
            cells = [f"{lone:.2f}", rate(flop, lone)]
        out.append(f"| {shape} | {calls:g} | {ms:.2f} | {rate(flop, ms)} | {cells[0]} | {cells[1]} |")
    if opts.lone:
        out += ["", f"GEMMs: {in_block:.2f} ms per pass in the block, {alone:.2f} ms alone."]
    out += ["", f"| other kernel (largest {opts.top}) | calls/pass | ms/pass |", "|---|---|---|"]
    out += [f"| {n[:110]} | {c:g} | {ms:.2f} |" for n, ms, c in res.others[: opts.top]]
    return out + [""]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flavor", default="70B", choices=sorted(LLAMA3_FLAVORS))
    ap.add_argument("--seq", type=int, default=8192)
    ap.add_argument("--batch", type=int, default=1)
    ap.add_argument("--attention", default="sdpa", help="model.attention backend")
    ap.add_argument("--norm", default="torch", help="the RMSNorm backend (the model args' norm_backend, "
                    "--model.overrides.norm_backend in a run)")
    ap.add_argument("--variants", default="base", help=f"comma-separated, of {', '.join(VARIANTS)}")
    ap.add_argument("--float8", default="none", choices=("none", *FP8_RECIPES),
                    help="run the block's Linears in FP8 with this recipe (trainer/float8.py)")
    ap.add_argument("--float8-backend", default="torch", choices=FP8_BACKENDS)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--iters", type=int, default=10, help="timed passes")
    ap.add_argument("--no-compile", dest="compile", action="store_false")
    ap.add_argument("--no-lone", dest="lone", action="store_false",
                    help="skip timing each GEMM alone (bf16 only: always skipped with --float8)")
    ap.add_argument("--lone-reps", type=int, default=20)
    ap.add_argument("--top", type=int, default=15, help="rows of the other-kernels table")
    ap.add_argument("--out", help="also write the report to this markdown file (its folder is created)")
    opts = ap.parse_args(argv)
    variants = [v for v in opts.variants.split(",") if v]
    bad = [v for v in variants if v not in VARIANTS]
    if bad or not variants:
        ap.error(f"--variants {opts.variants!r}: valid names are {', '.join(VARIANTS)}")
    if opts.float8 != "none" and opts.lone:
        opts.lone = False  # lone_mm_ms times bf16 matmuls: no like-for-like partner for FP8 GEMMs
        print("--float8: the GEMMs are not timed alone (that timing is bf16 only)", file=sys.stderr)
    if opts.float8 != "none" and "fused" in variants:
        ap.error("--variants fused runs its projections through F.linear, not Float8Linear: "
                 "it cannot be combined with --float8")
    if opts.seq < 1 or opts.batch < 1 or opts.iters < 1 or opts.warmup < 0:
        ap.error("--seq, --batch and --iters must be >= 1, --warmup >= 0")
    try:
        out = prepare_out(opts.out) if opts.out else None
    except ValueError as err:
        ap.error(str(err))
    if opts.float8 != "none":
        try:  # the trainer's check of the section (a Triton FP8 backend off CUDA), before any build
            validate_float8_config(float8_config(opts))
        except ValueError as err:
            ap.error(f"--float8 {opts.float8} --float8-backend {opts.float8_backend}: {err}")
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    opts.dtype = torch.bfloat16
    try:
        args = dataclasses.replace(LLAMA3_FLAVORS[opts.flavor], attention=opts.attention,
                                   norm_backend=opts.norm, max_seq_len=max(opts.seq, 2))
    except ValueError as err:
        ap.error(str(err))
    where = torch.cuda.get_device_name(device) if device.type == "cuda" else "CPU"
    precision = "bf16" if opts.float8 == "none" else f"FP8 {opts.float8} ({opts.float8_backend})"
    lines = [f"# Llama-3 {opts.flavor} block, batch {opts.batch} x seq {opts.seq}, {precision}, "
             f"{'compiled' if opts.compile else 'eager'}, attention {opts.attention}, norm {opts.norm}",
             "", f"{where}, torch {torch.__version__}, {time.strftime('%Y-%m-%d')}", ""]
    try:
        for v in variants:
            lines += report(probe(v, args, opts, device), opts, device)
    except (BackendUnavailable, ThunderKittensUnavailable) as err:
        # A kernel backend that cannot run here says why: one line, no traceback. Only that: any other
        # error (a shape the probe got wrong) keeps its traceback, not the look of a missing backend.
        ap.error(f"--attention {opts.attention}, --norm {opts.norm} on {where}: {err}")
    text = "\n".join(lines)
    print(text)
    if out:
        try:
            write_out(out, text)
        except ValueError as err:
            ap.error(str(err))
    return 0


if __name__ == "__main__":
    sys.exit(main())
