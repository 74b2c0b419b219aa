r"""Train one config twice with different overrides on the same data and compare the loss curves.

    python scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 \
        --a=--model.attention=sdpa --b=--model.attention=triton --out docs/perf/attn_curves.md

Both runs use the same seed and sample stream, so at step 1 they differ only by the change under test;
later steps also carry chaotic amplification of rounding. The report gives both curves at a few steps,
the largest relative difference over all steps, and the mean relative difference over the last 10% of
steps (the "loss curves within X% after N steps" figure), plus each run's tokens/s/GPU.
Both runs' folders and logs stay in $TMPDIR/titankit_compare_* (/tmp by default), named at the start;
a log holds its run's command, then its output as it prints it (so a run stopped from outside leaves
all it printed); a run past --timeout is ended with all its ranks and reported in one line.

As a gate (CI, a backend change): a divergence (a null, NaN or inf loss) ends the report with a FAIL
line, and --max-rel-diff X with a PASS or FAIL line for the largest relative difference over the
compared steps. Exit status: 0 the runs were compared (and are within --max-rel-diff, when given);
1 a run failed or timed out, the curves diverged, or they differ by more than --max-rel-diff;
2 bad input (arguments, config, metrics files, --out).
"""

from __future__ import annotations

import argparse
import math
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

from launch_group import run_group, stop_reason  # noqa: E402
from report_out import prepare_out, write_out  # noqa: E402


def train_argv(config: str, overrides: list[str], steps: int, folder: Path, name: str) -> list[str]:
    """The trainer's arguments for one run; the config check and the launch use the same list."""
    return ["--config", config, *overrides, f"--training.steps={steps}", "--metrics.log_freq=1",
            "--checkpoint.enable=false", f"--run.dump_folder={folder}", f"--run.name={name}"]


def check_trainer_args(argv: list[str], ngpu: int, where: str, quiet: bool = False) -> None:
    """Every check `trainer.train` runs before starting a process group, here in this process, so a
    typo in the last run of a batch fails in seconds instead of after the others have trained
    (ValueError starting with `where`). quiet: the config's warnings are left to the run's own log."""
    import warnings

    from trainer.config import ConfigError, load_config, validate_config

    try:
        with warnings.catch_warnings():
            if quiet:
                warnings.simplefilter("ignore")
            validate_config(load_config(argv), ngpu)
    except (ConfigError, ValueError) as exc:
        raise ValueError(f"{where}{exc}") from None


def check_config(name: str, argv: list[str], ngpu: int) -> None:
    """check_trainer_args for run `name` (a or b) of this script."""
    check_trainer_args(argv, ngpu, f"run {name} (--{name} plus --common): ")


def own_key_override(tokens: list[str], own) -> tuple[str, str] | None:
    """The first `--section.key[=value]` among `tokens` whose key the calling script sets itself on
    every launch (a key of `own`), as (token, key): the script's own value would replace it silently."""
    for tok in tokens:
        key = tok[2:].split("=", 1)[0] if tok.startswith("--") else ""
        if key in own:
            return tok, key
    return None


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
    # The command first, then the run's output as it prints it (run_group appends it): a run stopped
    # from outside (SIGTERM, Ctrl-C) or timed out still leaves all it printed, as the help promises.
    log.write_text(" ".join(cmd) + "\n\n")
    try:
        # run_group, not subprocess.run: a timeout must also end the ranks (torchrun puts each in a
        # session of its own), which would otherwise train on, and it raises once they are gone.
        proc = run_group(cmd, timeout=timeout, cwd=ROOT, env=env, log=log)
    except (KeyboardInterrupt, SystemExit) as exc:  # run_group ended the ranks; SIGTERM -> SystemExit
        with log.open("a") as f:
            f.write(f"\nstopped from outside ({stop_reason(exc)}); the output above is all it printed\n")
        raise
    except subprocess.TimeoutExpired:
        with log.open("a") as f:
            f.write(f"\ntimed out after {timeout:.0f} s (--timeout)\n")
        raise RuntimeError(f"run {name} timed out after {timeout:.0f} s (logs: {log})") from None
    if proc.returncode != 0:
        raise RuntimeError(failure_message(name, proc.returncode, proc.stdout + proc.stderr, log))
    return read_metrics(folder / name / "metrics.jsonl")


def _metrics_file(path: Path) -> Path:
    """A run's metrics.jsonl, or a run folder holding one (what `--run.dump_folder/--run.name` made)."""
    if path.is_dir():
        if (path / "metrics.jsonl").is_file():
            return path / "metrics.jsonl"
        raise FileNotFoundError(f"{path}: a folder without metrics.jsonl (give a run's metrics.jsonl "
                                "or the run folder holding it)")
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such file (give a run's metrics.jsonl or its run folder)")
    return path


def read_metrics(path: Path) -> list[dict]:
    """The rows with a loss. Lines that are not JSON rows with an integer step (a line torn by a crash,
    which the trainer leaves in place when the run resumes, so it can sit mid-file) are skipped with
    one warning naming FILE:LINE, by the trainer's own reading of a line (parse_row)."""
    from trainer.metrics_superseded import parse_row

    path = _metrics_file(Path(path))
    lines = [(n, line) for n, line in enumerate(path.read_text().splitlines(), 1) if line.strip()]
    if not lines:
        raise ValueError(f"{path}: empty file (no metrics rows)")
    rows, skipped = [], []
    for n, line in lines:
        row, step = parse_row(line)
        if step is not None:
            rows.append(row)
        else:
            skipped.append(str(n))
    if skipped:
        print(f"warning: {path}:{','.join(skipped[:5])}{'...' if len(skipped) > 5 else ''}: "
              f"{len(skipped)} line(s) that are not JSON rows skipped (a line torn by a crash)",
              file=sys.stderr)
    rows = [r for r in rows if "loss_metrics/global_avg_loss" in r]
    if not rows:
        raise ValueError(f"{path}: no row with loss_metrics/global_avg_loss")
    return rows


def _loss(row: dict) -> float:
    # The trainer writes a non-finite loss as null; NaN keeps it out of every "match" below.
    v = row["loss_metrics/global_avg_loss"]
    return float("nan") if v is None else float(v)


def _rel(a: float, b: float) -> float:
    if not (math.isfinite(a) and math.isfinite(b)):
        return math.inf  # a diverged run never matches, and max() would drop a NaN
    if a == 0:
        return 0.0 if b == 0 else math.inf
    return abs(b - a) / abs(a)


def compare(a: list[dict], b: list[dict]) -> dict:
    """Per-step relative difference |b - a| / |a| of the global average loss; a step where either loss
    is null, NaN or inf counts as infinitely different, and the first such step is `diverged_step`."""
    la = {r["step"]: _loss(r) for r in a}
    lb = {r["step"]: _loss(r) for r in b}
    steps = sorted(set(la) & set(lb))
    if not steps:
        raise ValueError(f"the two runs logged no common step (A: {_span(la)}, B: {_span(lb)})")
    rel = {s: _rel(la[s], lb[s]) for s in steps}
    bad = [s for s in steps if not (math.isfinite(la[s]) and math.isfinite(lb[s]))]
    tail = steps[-max(1, len(steps) // 10):]
    return {"steps": steps, "a": la, "b": lb, "rel": rel, "max_rel": max(rel.values()),
            "max_rel_step": max(rel, key=rel.get),  # the first step of the largest, so the first inf
            "diverged_step": bad[0] if bad else None,
            "steps_a": sorted(la), "steps_b": sorted(lb),
            "tail_mean_rel": sum(rel[s] for s in tail) / len(tail),
            "tail_mean_a": sum(la[s] for s in tail) / len(tail),
            "tail_mean_b": sum(lb[s] for s in tail) / len(tail)}


def _span(steps) -> str:
    steps = sorted(steps)
    return f"steps {steps[0]}-{steps[-1]} ({len(steps)} rows)" if steps else "no steps"


def steady_tps(rows: list[dict], skip: int) -> float:
    """Tokens/s weighted by each step's time, after `skip` steps (all if none is left); NaN when no row
    has the timing (a hand-made or trimmed file), which the report shows as n/a."""
    rows = [r for r in rows if "throughput(tps)" in r and "time_metrics/end_to_end(s)" in r]
    st = [r for r in rows if r["step"] > skip] or rows
    wall = sum(r["time_metrics/end_to_end(s)"] for r in st)
    if not wall:
        return math.nan
    return sum(r["throughput(tps)"] * r["time_metrics/end_to_end(s)"] for r in st) / wall


def report(c: dict, label_a: str, label_b: str, tps_a: float, tps_b: float,
           tps_what: str = "after warm-up") -> str:
    steps = c["steps"]
    bad = c.get("diverged_step")
    shown = sorted({steps[0], *steps[:: max(1, len(steps) // 8)], steps[-1], *([bad] if bad else [])})
    lines = []
    if "steps_a" in c:
        lines += [f"{label_a}: {_span(c['steps_a'])}, {label_b}: {_span(c['steps_b'])}; compared: "
                  f"{_span(steps)}"]
        if c["steps_a"] != c["steps_b"]:
            lines += ["warning: the runs logged different steps: only the common ones are compared "
                      "(and runs of different lengths have different lr schedules)"]
        lines += [""]
    if bad is not None:
        lines += [f"DIVERGED at step {bad} (the first step with a null, NaN or inf loss): "
                  f"{label_a} {c['a'][bad]}, {label_b} {c['b'][bad]}", ""]
    lines += [f"| step | {label_a} | {label_b} | rel. diff |", "|---|---|---|---|"]
    lines += [f"| {s} | {c['a'][s]:.4f} | {c['b'][s]:.4f} | {c['rel'][s]:.2e} |" for s in shown]
    lines += ["", f"max relative difference {c['max_rel']:.2e} (step {c['max_rel_step']}); mean over the "
              f"last {max(1, len(steps) // 10)} steps: {c['tail_mean_a']:.4f} vs {c['tail_mean_b']:.4f}, "
              f"relative difference of the curves {c['tail_mean_rel']:.2e}",
              f"tokens/s/GPU {tps_what}: {label_a} {_tps(tps_a)}, {label_b} {_tps(tps_b)}"]
    return "\n".join(lines)


def verdict(c: dict, max_rel_diff: float | None) -> str | None:
    """The report's last line when it gates: FAIL for a divergence; else, with --max-rel-diff, PASS or
    FAIL for the largest relative difference over the compared steps; None otherwise."""
    bad = c["diverged_step"]
    if bad is not None:
        return f"FAIL: diverged at step {bad} (a null, NaN or inf loss)"
    if max_rel_diff is None:
        return None
    over = c["max_rel"] > max_rel_diff
    return (f"{'FAIL' if over else 'PASS'}: max relative difference {c['max_rel']:.2e} (step "
            f"{c['max_rel_step']}) {'>' if over else '<='} --max-rel-diff {max_rel_diff:.2e}")


def _tps(v: float) -> str:
    return "n/a" if math.isnan(v) else f"{v:,.0f}"


def _report_runs(c: dict, a: list[dict], b: list[dict], warmup: int) -> str:
    """The report, tokens/s over the compared steps only (a 10-step run against the first 3 steps of a
    longer one, not its whole length), said plainly when --warmup leaves no steady step."""
    common = set(c["steps"])
    a, b = ([r for r in rows if r["step"] in common] for rows in (a, b))
    what = "after warm-up"
    if not any(s > warmup for s in common):
        what = f"over all compared steps (--warmup {warmup} leaves no step after warm-up)"
        print(f"warning: --warmup {warmup} leaves no compared step after warm-up (last step "
              f"{max(common)}): tokens/s are over all steps, warm-up included", file=sys.stderr)
    return report(c, "A", "B", steady_tps(a, warmup), steady_tps(b, warmup), what)


# Keys every run gets from compare_losses itself (train_argv): an override of one would be replaced
# without a word, so it is refused, pointing at the flag that sets it (None: nothing to set).
_OWN_KEYS = {"training.steps": "--steps", "checkpoint.enable": None, "metrics.log_freq": None,
             "run.name": None, "run.dump_folder": None}
_TRAIN_ONLY = ("config", "steps", "ngpu", "a", "b", "common", "timeout")  # defaults None: unset
_DEFAULTS = {"steps": 50, "ngpu": 0, "a": "", "b": "", "common": "", "timeout": 3600.0}


def parse_overrides(flag: str, text: str) -> list[str]:
    """One of --a/--b/--common split like a shell would; ValueError naming the flag."""
    try:
        tokens = shlex.split(text)
    except ValueError as exc:
        raise ValueError(f"{flag}={text!r}: {exc} (one shell-quoted string of overrides)") from None
    if found := own_key_override(tokens, _OWN_KEYS):
        key, use = found[1], _OWN_KEYS[found[1]]
        raise ValueError(f"{flag} sets --{key}, which compare_losses sets itself for both runs"
                         + (f": use {use}" if use else " (leave it out)"))
    return tokens


def _positive_float(text: str) -> float:
    """--max-rel-diff: a finite number > 0 (0 would fail any two runs that are not bitwise equal)."""
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and value > 0):
        raise argparse.ArgumentTypeError(f"{text!r}: must be a finite number > 0, e.g. 0.01 for 1%")
    return value


def _publish(head: str, c: dict, a: list[dict], b: list[dict], args, out: Path | None) -> int:
    """Print the report (and write it to --out), its verdict last; the exit status: 1 on a FAIL."""
    text = head + _report_runs(c, a, b, args.warmup)
    line = verdict(c, args.max_rel_diff)
    if line:
        text += f"\n\n{line}"
    print(text)
    if out:
        write_out(out, text)
    return 1 if line and line.startswith("FAIL") else 0


def _files_mode(args) -> int:
    out = prepare_out(args.out) if args.out else None
    a, b = (read_metrics(Path(f)) for f in args.files)
    return _publish(f"A: `{args.files[0]}`, B: `{args.files[1]}`\n\n", compare(a, b), a, b, args, out)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", help="the TOML config both runs train (not with --files)")
    ap.add_argument("--steps", type=int, help="steps of each run (default 50)")
    ap.add_argument("--ngpu", type=int, help="processes per run (default: all GPUs or 2)")
    ap.add_argument("--a", help="overrides of run A, one shell-quoted string")
    ap.add_argument("--b", help="overrides of run B")
    ap.add_argument("--common", help="overrides of both runs")
    ap.add_argument("--warmup", type=int, default=5, help="steps left out of the throughput figure")
    ap.add_argument("--out", help="also write the report here (its folder is created)")
    ap.add_argument("--timeout", type=float, help="seconds per run (default 3600)")
    ap.add_argument("--max-rel-diff", type=_positive_float, metavar="X",
                    help="exit 1 (and end with a FAIL line) when the largest relative loss difference "
                         "over the compared steps exceeds X, e.g. 0.01 for 1%%; a PASS line otherwise")
    ap.add_argument("--files", nargs=2, metavar=("A", "B"),
                    help="compare two existing runs instead of training: each a metrics.jsonl or the "
                         "run folder holding it (runs of different lengths are compared on their "
                         "common steps); only --warmup, --out and --max-rel-diff go with it")
    args = ap.parse_args(argv)
    if args.files:
        ignored = [f"--{k}" for k in _TRAIN_ONLY if getattr(args, k) is not None]
        if ignored:
            print(f"error: {', '.join(ignored)} train runs; --files compares saved ones (leave "
                  f"{'it' if len(ignored) == 1 else 'them'} out)", file=sys.stderr)
            return 2
        try:
            return _files_mode(args)
        except (ValueError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
    if not args.config:
        ap.error("--config is required unless --files compares saved runs")
    for k, v in _DEFAULTS.items():
        if getattr(args, k) is None:
            setattr(args, k, v)
    ngpu = args.ngpu
    if ngpu <= 0:
        import torch

        ngpu = torch.cuda.device_count() or 2
    try:
        out = prepare_out(args.out) if args.out else None  # before two runs, not after them
        common = parse_overrides("--common", args.common)
        over = {"a": common + parse_overrides("--a", args.a), "b": common + parse_overrides("--b", args.b)}
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
    try:
        head = (f"`{args.config}` on {ngpu} processes, {args.steps} steps; A: `{args.a or '(config)'}`, "
                f"B: `{args.b or '(config)'}`, both: `{args.common}`\n\n")
        return _publish(head, compare(a, b), a, b, args, out)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
