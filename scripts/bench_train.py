"""Training throughput benchmark: run configs for fixed warm-up + measured steps, print a table.

    python scripts/bench_train.py --suite scripts/bench_suites/h200_x2.toml --out docs/perf/run.md
    python scripts/bench_train.py --config configs/debug.toml --ngpu 2 --warmup 2 --steps 4

A suite is a TOML file with [[variant]] tables: name, config, overrides (list of "--k=v"), and
optionally ngpu and group. Each variant runs as its own torchrun job (so a crash or OOM costs one row),
with log_freq 1; tokens/s/GPU is total tokens over total wall time of the steps after warm-up.
Variants with group = "70b-layers" and overrides setting model.overrides.n_layers to two depths
give the per-layer extrapolation of ANCHORS.md section 3 to 80 layers, printed as an estimate.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


@dataclass
class Variant:
    name: str
    config: str
    overrides: list[str] = field(default_factory=list)
    ngpu: int = 0
    group: str = ""


@dataclass
class Result:
    variant: Variant
    ok: bool
    tps: float = 0.0
    tflops: float = 0.0
    mfu: float | None = None
    mem_active: float = 0.0
    mem_reserved: float = 0.0
    final_loss: float = float("nan")
    error: str = ""
    resolved: dict = field(default_factory=dict)


def read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def load_suite(path: str) -> list[Variant]:
    data = read_toml(Path(path))
    out = []
    for i, v in enumerate(data.get("variant", [])):
        unknown = set(v) - {"name", "config", "overrides", "ngpu", "group"}
        if unknown or "name" not in v or "config" not in v:
            raise ValueError(f"{path}: variant #{i + 1} needs name and config; unknown keys {sorted(unknown)}")
        out.append(Variant(**v))
    if not out:
        raise ValueError(f"{path}: no [[variant]] tables")
    return out


def _default_ngpu() -> int:
    import torch

    return torch.cuda.device_count() or 2


def run_variant(v: Variant, warmup: int, steps: int, workdir: Path, log_dir: Path | None,
                timeout: float) -> Result:
    ngpu = v.ngpu or _default_ngpu()
    total = warmup + steps
    run_name = v.name.replace(" ", "_").replace("/", "_")
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ngpu}",
           "-m", "trainer.train", "--config", v.config, *v.overrides,
           f"--training.steps={total}", "--metrics.log_freq=1", "--checkpoint.enable=false",
           f"--run.dump_folder={workdir}", f"--run.name={run_name}"]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    t0 = time.time()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=timeout)
    log = proc.stdout + proc.stderr
    if log_dir is not None:
        (log_dir / f"{run_name}.log").write_text(" ".join(cmd) + "\n\n" + log)
    res = Result(v, ok=proc.returncode == 0)
    if not res.ok:
        res.error = _last_error(log)
        return res
    rows = [json.loads(line) for line in (workdir / run_name / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in rows if r["step"] > warmup]
    if not steady:
        res.ok, res.error = False, "no steps after warm-up"
        return res
    wall = sum(r["time_metrics/end_to_end(s)"] for r in steady)
    res.tps = sum(r["throughput(tps)"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall
    res.tflops = sum(r["tflops"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall
    res.mfu = None if steady[0]["mfu(%)"] is None else (
        sum(r["mfu(%)"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall)
    res.mem_active = max(r["memory/max_active(GiB)"] for r in steady)
    res.mem_reserved = max(r["memory/max_reserved(GiB)"] for r in steady)
    res.final_loss = steady[-1]["loss_metrics/global_avg_loss"]
    res.resolved = read_toml(workdir / run_name / "config.toml")
    print(f"  {v.name}: {res.tps:,.0f} tokens/s/GPU in {time.time() - t0:.0f} s", flush=True)
    return res


def _last_error(log: str) -> str:
    lines = [ln for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln:
            return ln.strip()[:200]
    return (lines[-1] if lines else "no output")[:200]


def _layout(r: dict) -> str:
    p = r.get("parallelism", {})
    parts = []
    for key, label in (("data_parallel_replicate_degree", "rep"), ("data_parallel_shard_degree", "fsdp"),
                       ("tensor_parallel_degree", "tp"), ("context_parallel_degree", "cp"),
                       ("expert_parallel_degree", "ep")):
        if p.get(key, 1) not in (1, -1):
            parts.append(f"{label}{p[key]}")
    if p.get("enable_async_tensor_parallel"):
        parts.append("asyncTP")
    return " ".join(parts) or "1 rank"


def table(results: list[Result]) -> str:
    head = ("| variant | model | layout | precision | compile | AC | local batch | seq | tokens/s/GPU "
            "| TFLOP/s | MFU | max active / reserved GiB |")
    lines = [head, "|" + "---|" * 12]
    for res in results:
        r = res.resolved
        if not res.ok:
            lines.append(f"| {res.variant.name} | failed: {res.error} |" + " |" * 10)
            continue
        m, t = r["model"], r["training"]
        prec = "fp8 " + r["float8"]["recipe"] if r["float8"]["enable"] else t["mixed_precision_param"]
        ac = r["activation_checkpoint"]["mode"]
        if ac == "selective":
            ac += f" ({r['activation_checkpoint']['selective_ac_option']})"
        layers = m.get("overrides", {}).get("n_layers")
        model = f"{m['name']} {m['flavor']}" + (f" ({layers} layers)" if layers else "")
        mfu = "n/a" if res.mfu is None else f"{res.mfu:.1f}%"
        lines.append(
            f"| {res.variant.name} | {model} | {_layout(r)} | {prec}, attn {m['attention']} | "
            f"{'on' if r['compile']['enable'] else 'off'} | {ac} | {t['local_batch_size']} | "
            f"{t['seq_len']} | {res.tps:,.0f} | {res.tflops:.0f} | {mfu} | "
            f"{res.mem_active:.1f} / {res.mem_reserved:.1f} |")
    return "\n".join(lines)


def extrapolate(results: list[Result], target_layers: int = 80) -> list[str]:
    """Per-token time is linear in depth: t(L) = a + b L. Two depths give b; report t(target)."""
    out = []
    groups: dict[str, list[Result]] = {}
    for res in results:
        if res.ok and res.variant.group:
            groups.setdefault(res.variant.group, []).append(res)
    for group, rs in groups.items():
        pts = sorted((int(r.resolved["model"]["overrides"]["n_layers"]), 1.0 / r.tps) for r in rs)
        if len(pts) < 2:
            continue
        (l1, t1), (l2, t2) = pts[0], pts[-1]
        slope = (t2 - t1) / (l2 - l1)
        t_target = t1 + slope * (target_layers - l1)
        out.append(f"{group}: per-layer per-token time {slope:.3e} s; extrapolated to {target_layers} "
                   f"layers: {1.0 / t_target:,.0f} tokens/s/GPU (an estimate from {l1} and {l2} layers)")
    return out


def environment() -> str:
    import torch

    parts = [f"python {platform.python_version()}", f"torch {torch.__version__}"]
    try:
        import triton

        parts.append(f"triton {triton.__version__}")
    except ImportError:
        pass
    if torch.cuda.is_available():
        parts.append(f"{torch.cuda.device_count()} x {torch.cuda.get_device_name()}")
        try:
            drv = subprocess.run(["nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader"],
                                 capture_output=True, text=True, timeout=30).stdout.split()[0]
            parts.append(f"driver {drv}")
        except (OSError, IndexError, subprocess.SubprocessError):
            pass
        parts.append(f"CUDA {torch.version.cuda}")
    else:
        parts.append(f"CPU ({os.cpu_count()} cores)")
    return ", ".join(parts)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--suite", help="TOML file of [[variant]] tables")
    ap.add_argument("--config", help="a single config instead of a suite")
    ap.add_argument("--ngpu", type=int, default=0, help="processes per variant (default: all GPUs or 2)")
    ap.add_argument("--warmup", type=int, default=5)
    ap.add_argument("--steps", type=int, default=20, help="measured steps after warm-up")
    ap.add_argument("--out", help="write the markdown table (and logs beside it) here")
    ap.add_argument("--timeout", type=float, default=1800, help="seconds per variant")
    ap.add_argument("overrides", nargs="*", help="overrides for --config")
    args = ap.parse_args(argv)
    if bool(args.suite) == bool(args.config):
        ap.error("give exactly one of --suite or --config")
    variants = load_suite(args.suite) if args.suite else [
        Variant(name=Path(args.config).stem, config=args.config, overrides=args.overrides)]
    for v in variants:
        v.ngpu = v.ngpu or args.ngpu
    log_dir = None
    if args.out:
        log_dir = Path(args.out).with_suffix("")
        log_dir.mkdir(parents=True, exist_ok=True)
    workdir = Path(tempfile.mkdtemp(prefix="titankit_bench_"))
    try:
        results = [run_variant(v, args.warmup, args.steps, workdir, log_dir, args.timeout) for v in variants]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    text = [f"Environment: {environment()}", f"Date: {time.strftime('%Y-%m-%d')}",
            f"Steps: {args.warmup} warm-up + {args.steps} measured", "", table(results)]
    extra = extrapolate(results)
    if extra:
        text += [""] + extra
    report = "\n".join(text)
    print(report)
    if args.out:
        Path(args.out).write_text(report + "\n")
    return 0 if all(r.ok for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
