"""Train one config twice with different overrides on the same data and compare the loss curves.

    python scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 \
        --a=--model.attention=sdpa --b=--model.attention=triton --out docs/perf/attn_curves.md

Both runs use the same seed and sample stream, so at step 1 they differ only by the change under test;
later steps also carry chaotic amplification of rounding. The report gives both curves at a few steps,
the largest relative difference over all steps, and the mean relative difference over the last 10% of
steps (the "loss curves within X% after N steps" figure), plus each run's tokens/s/GPU.
Both runs' folders and logs stay in $TMPDIR/titankit_compare_* (/tmp by default), named at the start;
a run past --timeout is ended with all its ranks and reported in one line.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # the config check imports `trainer` from this checkout
sys.path.insert(0, str(ROOT / "scripts"))  # launch_group, also when this file is loaded from elsewhere

from launch_group import run_group  # noqa: E402


def train_argv(config: str, overrides: list[str], steps: int, folder: Path, name: str) -> list[str]:
    """The trainer's arguments for one run; the config check and the launch use the same list."""
    return ["--config", config, *overrides, f"--training.steps={steps}", "--metrics.log_freq=1",
            "--checkpoint.enable=false", f"--run.dump_folder={folder}", f"--run.name={name}"]


def check_config(name: str, argv: list[str], ngpu: int) -> None:
    """Every check `trainer.train` runs before starting a process group, here in this process, so a
    typo in --b fails in seconds instead of after run A has trained (ValueError naming the run)."""
    from trainer.config import ConfigError, load_config, validate_config

    try:
        validate_config(load_config(argv), ngpu)
    except (ConfigError, ValueError) as exc:
        raise ValueError(f"run {name} (--{name} plus --common): {exc}") from None


# Lines that say why a run died: the trainer's own (trainer/train.py prints `error: <message>` for a
# config error, `[rankN] error: <message>` for a refused start-up) and the final line of each Python
# traceback (the exception and its message).
_TRAINER_ERROR = re.compile(r"^(\[rank\d+\] )?(error: .*)")


def error_lines(output: str, limit: int = 8) -> list[str]:
    lines = output.splitlines()
    found: list[str] = []
    for i, line in enumerate(lines):
        if m := _TRAINER_ERROR.match(line):
            found.append(m.group(2))  # without the rank: every rank prints the same
        elif line.startswith("Traceback (most recent call last):"):
            rest = (l for l in lines[i + 1:] if l and not l[0].isspace())
            last = next(rest, None)
            # torchrun's own traceback ends in ChildFailedError, which only says a rank failed.
            if last is not None and "ChildFailedError" not in last:
                found.append(last)
    unique = list(dict.fromkeys(found))  # every rank prints the same error
    return unique[-limit:]


def failure_message(name: str, code: int, output: str, log: Path, tail_lines: int = 25) -> str:
    errors = error_lines(output)
    tail = "\n".join(output.splitlines()[-tail_lines:])
    text = f"run {name} failed (exit {code}); its whole output: {log}\n"
    if errors:
        text += "the error:\n" + "\n".join(f"  {e}" for e in errors) + "\n"
    return text + f"the last {tail_lines} lines of its output:\n{tail}"


def run(config: str, overrides: list[str], steps: int, ngpu: int, folder: Path, name: str,
        timeout: float) -> list[dict]:
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ngpu}",
           "-m", "trainer.train", *train_argv(config, overrides, steps, folder, name)]
    env = dict(os.environ, NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1",
               NVSHMEM_DISABLE_NVLS="1", OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"))
    log = folder / f"{name}.log"
    try:
        # run_group, not subprocess.run: a timeout must also end the ranks (torchrun puts each in a
        # session of its own), which would otherwise train on, and it raises once they are gone.
        proc = run_group(cmd, timeout=timeout, cwd=ROOT, env=env)
    except subprocess.TimeoutExpired as exc:
        log.write_text(" ".join(cmd) + "\n\n" + (exc.stdout or "") + (exc.stderr or "")
                       + f"\ntimed out after {timeout:.0f} s (--timeout)\n")
        raise RuntimeError(f"run {name} timed out after {timeout:.0f} s (logs: {log})") from None
    log.write_text(" ".join(cmd) + "\n\n" + proc.stdout + proc.stderr)
    if proc.returncode != 0:
        raise RuntimeError(failure_message(name, proc.returncode, proc.stdout + proc.stderr, log))
    return read_metrics(folder / name / "metrics.jsonl")


def read_metrics(path: Path) -> list[dict]:
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such metrics file (a run's metrics.jsonl)")
    rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if "loss_metrics/global_avg_loss" in r]
    if not rows:
        raise ValueError(f"{path}: no row with loss_metrics/global_avg_loss")
    return rows


def compare(a: list[dict], b: list[dict]) -> dict:
    """Per-step relative difference |b - a| / |a| of the global average loss."""
    la = {r["step"]: r["loss_metrics/global_avg_loss"] for r in a}
    lb = {r["step"]: r["loss_metrics/global_avg_loss"] for r in b}
    steps = sorted(set(la) & set(lb))
    if not steps:
        raise ValueError("the two runs logged no common step")
    rel = {s: abs(lb[s] - la[s]) / abs(la[s]) for s in steps}
    tail = steps[-max(1, len(steps) // 10):]
    return {"steps": steps, "a": la, "b": lb, "rel": rel, "max_rel": max(rel.values()),
            "max_rel_step": max(rel, key=rel.get),
            "tail_mean_rel": sum(rel[s] for s in tail) / len(tail),
            "tail_mean_a": sum(la[s] for s in tail) / len(tail),
            "tail_mean_b": sum(lb[s] for s in tail) / len(tail)}


def steady_tps(rows: list[dict], skip: int) -> float:
    st = [r for r in rows if r["step"] > skip] or rows
    wall = sum(r["time_metrics/end_to_end(s)"] for r in st)
    return sum(r["throughput(tps)"] * r["time_metrics/end_to_end(s)"] for r in st) / wall


def report(c: dict, label_a: str, label_b: str, tps_a: float, tps_b: float) -> str:
    steps = c["steps"]
    shown = sorted({steps[0], *steps[:: max(1, len(steps) // 8)], steps[-1]})
    lines = [f"| step | {label_a} | {label_b} | rel. diff |", "|---|---|---|---|"]
    lines += [f"| {s} | {c['a'][s]:.4f} | {c['b'][s]:.4f} | {c['rel'][s]:.2e} |" for s in shown]
    lines += ["", f"max relative difference {c['max_rel']:.2e} (step {c['max_rel_step']}); mean over the "
              f"last {max(1, len(steps) // 10)} steps: {c['tail_mean_a']:.4f} vs {c['tail_mean_b']:.4f}, "
              f"relative difference of the curves {c['tail_mean_rel']:.2e}",
              f"tokens/s/GPU after warm-up: {label_a} {tps_a:,.0f}, {label_b} {tps_b:,.0f}"]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="the TOML config both runs train (not with --files)")
    ap.add_argument("--steps", type=int, default=50)
    ap.add_argument("--ngpu", type=int, default=0, help="processes per run (default: all GPUs or 2)")
    ap.add_argument("--a", default="", help="overrides of run A, one shell-quoted string")
    ap.add_argument("--b", default="", help="overrides of run B")
    ap.add_argument("--common", default="", help="overrides of both runs")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the throughput figure")
    ap.add_argument("--out", help="also write the report here")
    ap.add_argument("--timeout", type=float, default=3600, help="seconds per run")
    ap.add_argument("--files", nargs=2, metavar=("A_JSONL", "B_JSONL"),
                    help="compare two existing metrics.jsonl files instead of training (runs of "
                         "different lengths are compared on their common steps)")
    args = ap.parse_args(argv)
    if args.files:
        a, b = (read_metrics(Path(f)) for f in args.files)
        text = (f"A: `{args.files[0]}`, B: `{args.files[1]}`\n\n"
                + report(compare(a, b), "A", "B", steady_tps(a, args.warmup), steady_tps(b, args.warmup)))
        print(text)
        if args.out:
            Path(args.out).write_text(text + "\n")
        return 0
    if not args.config:
        ap.error("--config is required unless --files compares saved runs")
    ngpu = args.ngpu
    if ngpu <= 0:
        import torch

        ngpu = torch.cuda.device_count() or 2
    common = shlex.split(args.common)
    over = {"a": common + shlex.split(args.a), "b": common + shlex.split(args.b)}
    try:
        for name, overrides in over.items():  # both, before either trains
            # The run folder is not checked (nothing is written); its real path comes below.
            check_config(name, train_argv(args.config, overrides, args.steps, Path("unused"), name), ngpu)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    folder = Path(tempfile.mkdtemp(prefix="titankit_compare_"))
    # Kept (the logs and metrics of both runs are there), and said where once, before anything can fail.
    print(f"run folders and logs: {folder}", flush=True)
    try:
        a = run(args.config, over["a"], args.steps, ngpu, folder, "a", args.timeout)
        b = run(args.config, over["b"], args.steps, ngpu, folder, "b", args.timeout)
    except RuntimeError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    c = compare(a, b)
    text = (f"`{args.config}` on {ngpu} processes, {args.steps} steps; A: `{args.a or '(config)'}`, "
            f"B: `{args.b or '(config)'}`, both: `{args.common}`\n\n"
            + report(c, "A", "B", steady_tps(a, args.warmup), steady_tps(b, args.warmup)))
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
