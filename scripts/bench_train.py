"""Training throughput benchmark: run configs for fixed warm-up + measured steps, print a table.

    python scripts/bench_train.py --suite scripts/bench_suites/h200_x2_fsdp.toml --out docs/perf/run.md
    python scripts/bench_train.py --config configs/debug.toml --ngpu 2 --warmup 2 --steps 4
    python scripts/bench_train.py --config configs/llama3_8b.toml --ngpu 2 --profile --out docs/perf/x.md

A suite is a TOML file with [[variant]] tables: name, config, overrides (list of "--k=v"), and
optionally ngpu, group and env (a table of environment variables for that variant's processes, e.g.
PYTORCH_CUDA_ALLOC_CONF). Each variant runs as its own torchrun job (so a crash, an OOM or a --timeout
costs one row: a job past its timeout, or one the script is stopped in, is ended with all its ranks),
with log_freq 1; tokens/s/GPU is total tokens over total wall time of the steps after warm-up. On
CUDA the last column is rank 0's mean SM clock and power draw over those steps (NVML), to tell a
slower row from a throttled GPU.
Variants with group = "70b-layers" and overrides setting model.overrides.n_layers to two depths
give the per-layer extrapolation of ANCHORS.md section 3 to 80 layers, printed as an estimate.
Arguments the script does not know (--section.key=value) are config overrides, added to every variant;
the keys the script sets itself (training.steps, metrics.log_freq, checkpoint.enable, run.*, the
profiling steps) are refused. Every variant's config and overrides are checked before the first runs.
--only REGEX runs the variants whose name matches (a suite too long for one sitting, in parts).
The run folders, and the logs when there is no --out, stay in $TMPDIR/titankit_bench_* (/tmp
by default), named at the start.

--profile traces --profile-steps more steps after the measured ones (so the profiler never slows the
measured steps) with trainer.profiling, and copies each variant's summary.md (where the time goes:
compute, exposed communication, optimizer, data) next to its log as <variant>.profile.md; --traces DIR
also keeps the per-rank Chrome traces there.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))  # launch_group, also when this file is loaded from elsewhere

from compare_losses import check_trainer_args, error_lines, own_key_override  # noqa: E402
from launch_group import run_group, stop_reason  # noqa: E402


@dataclass
class Variant:
    name: str
    config: str
    overrides: list[str] = field(default_factory=list)
    ngpu: int = 0
    group: str = ""
    env: dict[str, str] = field(default_factory=dict)


@dataclass
class Result:
    variant: Variant
    ok: bool
    tps: float = 0.0
    tflops: float = 0.0
    mfu: float | None = None
    mem_active: float | None = None  # None off CUDA: no allocator peaks
    mem_reserved: float | None = None
    alloc_retries: int = 0  # CUDA allocator retries over the measured steps (memory at its limit)
    final_loss: float = float("nan")
    gpu_clock_power: tuple[float, float] | None = None  # rank 0's mean SM MHz and W, measured steps
    error: str = ""
    world: int = 0  # processes the variant ran on
    resolved: dict = field(default_factory=dict)


def read_toml(path: Path) -> dict:
    try:
        import tomllib
    except ImportError:  # Python 3.10
        import tomli as tomllib
    with open(path, "rb") as f:
        return tomllib.load(f)


def _read_suite(path: str) -> list:
    """The suite's [[variant]] tables; a ValueError naming the file for anything else."""
    if not Path(path).is_file():
        what = "a folder" if Path(path).is_dir() else "no such file"
        raise ValueError(f"--suite {path}: {what}; give a TOML file of [[variant]] tables "
                         "(e.g. scripts/bench_suites/h200_x2_fsdp.toml)")
    try:
        data = read_toml(Path(path))
    except ValueError as exc:  # tomllib.TOMLDecodeError: the message holds line and column
        raise ValueError(f"--suite {path}: not valid TOML ({exc})") from None
    tables = data.get("variant")
    if not isinstance(tables, list) or not tables or not all(isinstance(v, dict) for v in tables):
        raise ValueError(f"{path}: no [[variant]] tables (each needs name and config, e.g. "
                         '[[variant]] name = "fsdp" config = "configs/debug.toml")')
    return tables


def load_suite(path: str) -> list[Variant]:
    out = []
    for i, v in enumerate(_read_suite(path)):
        unknown = set(v) - {"name", "config", "overrides", "ngpu", "group", "env"}
        if unknown or not isinstance(v.get("name"), str) or not isinstance(v.get("config"), str):
            raise ValueError(f"{path}: variant #{i + 1} needs name and config (strings); "
                             f"unknown keys {sorted(unknown)}")
        where = f"{path}: variant {v['name']!r}"
        env = v.get("env", {})
        if not isinstance(env, dict) or not all(isinstance(x, str) for kv in env.items() for x in kv):
            raise ValueError(f"{where}: env must be a table of strings, "
                             'e.g. env = {PYTORCH_CUDA_ALLOC_CONF = "expandable_segments:True"}')
        # A list only: a string would go to the trainer one character at a time, and splitting it
        # here would be a second quoting rule next to TOML's own.
        over = v.get("overrides", [])
        if not isinstance(over, list) or not all(isinstance(x, str) for x in over):
            raise ValueError(f"{where}: overrides must be a list of strings, e.g. "
                             f'overrides = ["--training.seq_len=128"], got {over!r}')
        ngpu = v.get("ngpu", 0)
        if type(ngpu) is not int or ngpu < 1 and "ngpu" in v:  # bool is not an int here
            raise ValueError(f"{where}: ngpu must be an integer >= 1, got {ngpu!r}")
        out.append(Variant(**v))
    names = [v.name for v in out]
    for name in names:
        if names.count(name) > 1:
            raise ValueError(f"{path}: {names.count(name)} variants are named {name!r}; each name must "
                             "be unique (it names the variant's row, log and run folder)")
    stems: dict[str, str] = {}
    for v in out:  # each variant's log, profile and run folder are named by it
        other = stems.setdefault(file_stem(v.name), v.name)
        if other != v.name:
            raise ValueError(f"{path}: variants {other!r} and {v.name!r} give the same file name "
                             f"{file_stem(v.name)!r}; make them differ in a letter or digit")
    return out


def _default_ngpu() -> int:
    import torch

    return torch.cuda.device_count() or 2


def profile_overrides(warmup: int, steps: int, profile_steps: int) -> list[str]:
    """Trace the profile_steps steps that follow the measured ones (trainer.profiling)."""
    return ["--profiling.enable_profiling", f"--profiling.profile_start_step={warmup + steps + 1}",
            f"--profiling.profile_steps={profile_steps}"]


def file_stem(name: str) -> str:
    """A variant name as a run and file name: letters, digits, '.', '-' and '_' only (commas, spaces
    and slashes make awkward shell arguments, and some file transfers refuse them)."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", name).strip("_") or "variant"


def train_argv(v: Variant, warmup: int, steps: int, profile_steps: int, workdir: Path) -> list[str]:
    """The trainer's arguments for one variant; the config check and the launch use the same list."""
    argv = ["--config", v.config, *v.overrides, f"--training.steps={warmup + steps + profile_steps}",
            "--metrics.log_freq=1", "--checkpoint.enable=false", f"--run.dump_folder={workdir}",
            f"--run.name={file_stem(v.name)}"]
    return argv + (profile_overrides(warmup, steps, profile_steps) if profile_steps else [])


def check_variant(v: Variant, argv: list[str], where: str) -> None:
    """The trainer's start-up checks for one variant, before any variant trains (its warnings are left
    to the run's own log, where they come again)."""
    check_trainer_args(argv, v.ngpu or _default_ngpu(), f"{where}variant {v.name!r}: ", quiet=True)


def run_variant(v: Variant, warmup: int, steps: int, workdir: Path, log_dir: Path | None,
                timeout: float, profile_steps: int = 0, trace_dir: Path | None = None) -> Result:
    ngpu = v.ngpu or _default_ngpu()
    run_name = file_stem(v.name)
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", f"--nproc_per_node={ngpu}",
           "-m", "trainer.train", *train_argv(v, warmup, steps, profile_steps, workdir)]
    env = dict(os.environ, OMP_NUM_THREADS=os.environ.get("OMP_NUM_THREADS", "1"),
               NCCL_NVLS_ENABLE="0", TORCH_SYMM_MEM_DISABLE_MULTICAST="1", NVSHMEM_DISABLE_NVLS="1")
    env.update(v.env)
    t0 = time.time()
    head = "".join(f"{k}={val} " for k, val in v.env.items()) + " ".join(cmd) + "\n\n"
    log_file = None if log_dir is None else log_dir / f"{run_name}.log"
    if log_file is not None:  # the command, then the output as it comes (run_group appends it)
        log_file.write_text(head)
    try:
        # run_group, not subprocess.run: a timeout must also end the ranks (torchrun puts each in a
        # session of its own), or they keep the GPUs while every later variant runs.
        proc = run_group(cmd, timeout=timeout, cwd=ROOT, env=env, log=log_file)
        log, rc = proc.stdout + proc.stderr, proc.returncode
    except subprocess.TimeoutExpired as exc:  # a hung variant costs one row, not the whole suite
        out = [x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
               for x in (exc.stdout, exc.stderr)]
        log, rc = "".join(out) + f"\ntimed out after {timeout:.0f} s (--timeout)", -1
        _append(log_file, f"\ntimed out after {timeout:.0f} s (--timeout)\n")
    except (KeyboardInterrupt, SystemExit) as exc:  # run_group ended the ranks (SIGTERM: SystemExit)
        _append(log_file, f"\nstopped from outside ({stop_reason(exc)}); the output above is all it "
                          "printed\n")
        raise
    res = Result(v, ok=rc == 0, world=ngpu)
    if not res.ok:
        res.error = _last_error(log)
        return res
    if profile_steps and not _keep_profile(workdir / run_name, run_name, log_dir, trace_dir):
        res.ok, res.error = False, "the run wrote no profile_traces/step-N/summary.md"
        return res
    # The run folder stays (see main), its traces do not: what was asked for is copied out above, and
    # a suite's per-rank Chrome traces would fill /tmp.
    shutil.rmtree(workdir / run_name / "profile_traces", ignore_errors=True)
    rows = [json.loads(line) for line in (workdir / run_name / "metrics.jsonl").read_text().splitlines()]
    steady = [r for r in rows if warmup < r["step"] <= warmup + steps]
    if not steady:
        res.ok, res.error = False, "no steps after warm-up"
        return res
    wall = sum(r["time_metrics/end_to_end(s)"] for r in steady)
    res.tps = sum(r["throughput(tps)"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall
    res.tflops = sum(r["tflops"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall
    res.mfu = None if steady[0]["mfu(%)"] is None else (
        sum(r["mfu(%)"] * r["time_metrics/end_to_end(s)"] for r in steady) / wall)
    # None off CUDA (no allocator peaks): the table says n/a, as for MFU, not a measured 0.0.
    peaks = {k: [r[k] for r in steady if r.get(k) is not None]
             for k in ("memory/max_active(GiB)", "memory/max_reserved(GiB)")}
    res.mem_active, res.mem_reserved = (max(v) if v else None for v in peaks.values())
    res.alloc_retries = sum(int(r.get("memory/num_alloc_retries", 0)) for r in steady)
    res.final_loss = steady[-1]["loss_metrics/global_avg_loss"]
    from trainer.gpu_monitor import CLOCK_KEY, POWER_KEY

    if all(CLOCK_KEY in r and POWER_KEY in r for r in steady):
        res.gpu_clock_power = tuple(sum(r[k] * r["time_metrics/end_to_end(s)"] for r in steady) / wall
                                    for k in (CLOCK_KEY, POWER_KEY))
    res.resolved = read_toml(workdir / run_name / "config.toml")
    print(f"  {v.name}: {res.tps:,.0f} tokens/s/GPU in {time.time() - t0:.0f} s", flush=True)
    return res


def _append(log_file: Path | None, line: str) -> None:
    if log_file is not None:
        with log_file.open("a") as f:
            f.write(line)


def _keep_profile(run_dir: Path, run_name: str, log_dir: Path | None, trace_dir: Path | None) -> bool:
    """Copy the profile of a finished variant out of the (temporary) run folder; False if none."""
    folders = sorted((run_dir / "profile_traces").glob("step-*"), key=lambda p: int(p.name[5:]))
    if not folders or not (folders[-1] / "summary.md").is_file():
        return False
    if log_dir is not None:
        shutil.copyfile(folders[-1] / "summary.md", log_dir / f"{run_name}.profile.md")
    if trace_dir is not None:
        shutil.copytree(folders[-1], trace_dir / run_name / folders[-1].name, dirs_exist_ok=True)
    return True


def _last_error(log: str) -> str:
    # The trainer's own `error:` line or a traceback's last line; torchrun's ChildFailedError, which
    # ends every failed log, only says that a rank failed.
    found = error_lines(log, limit=1)
    if found and "\ntimed out after" not in log:
        return found[-1][:200]
    lines = [ln for ln in log.splitlines() if ln.strip()]
    for ln in reversed(lines):
        if "Error" in ln or "error:" in ln or "timed out" in ln:
            return ln.strip()[:200]
    return (lines[-1] if lines else "no output")[:200]


def _layout(r: dict, world: int) -> str:
    p = dict(r.get("parallelism", {}))
    if p.get("data_parallel_shard_degree", -1) == -1:
        # -1 takes the ranks the other degrees leave (EP borrows from dp_shard, so it does not count).
        others = 1
        for key in ("data_parallel_replicate_degree", "tensor_parallel_degree", "context_parallel_degree"):
            others *= p.get(key, 1)
        p["data_parallel_shard_degree"] = world // others
    parts = []
    for key, label in (("data_parallel_replicate_degree", "rep"), ("data_parallel_shard_degree", "fsdp"),
                       ("tensor_parallel_degree", "tp"), ("context_parallel_degree", "cp"),
                       ("expert_parallel_degree", "ep")):
        if p.get(key, 1) != 1:
            parts.append(f"{label}{p[key]}")
    if p.get("enable_async_tensor_parallel"):
        parts.append("asyncTP")
    return " ".join(parts) or "1 rank"


def _batch(r: dict, world: int) -> str:
    """Local batch, with the gradient-accumulation count when global_batch_size asks for one."""
    t = r["training"]
    local, glob = t["local_batch_size"], t.get("global_batch_size", -1)
    if glob <= 0:
        return str(local)
    p = r.get("parallelism", {})
    non_dp = p.get("tensor_parallel_degree", 1) * p.get("context_parallel_degree", 1)
    accum = glob // (local * (world // non_dp))
    return f"{local} x {accum} accum" if accum > 1 else str(local)


def table(results: list[Result]) -> str:
    import torch

    cuda = torch.cuda.is_available()
    head = ("| variant | model | layout | precision | compile | AC | local batch | seq | tokens/s/GPU "
            "| TFLOP/s | MFU | max active / reserved GiB | alloc retries | loss, last measured step "
            "| GPU clock MHz / power W |")
    lines = [head, "|" + "---|" * 15]
    for res in results:
        r = res.resolved
        if not res.ok:
            lines.append(f"| {res.variant.name} | failed: {res.error} |" + " |" * 13)
            continue
        m, t = r["model"], r["training"]
        # On CPU the trainer computes in float32 whatever mixed_precision_param says.
        prec = "fp8 " + r["float8"]["recipe"] if r["float8"]["enable"] else (
            t["mixed_precision_param"] if cuda else "float32 (CPU)")
        ac = r["activation_checkpoint"]["mode"]
        if ac == "selective":
            ac += f" ({r['activation_checkpoint']['selective_ac_option']})"
        elif ac == "memory_budget":
            ac += f" ({r['activation_checkpoint']['memory_budget']:g})"
        layers = m.get("overrides", {}).get("n_layers")
        model = f"{m['name']} {m['flavor']}" + (f" ({layers} layers)" if layers else "")
        mfu = "n/a" if res.mfu is None else f"{res.mfu:.1f}%"
        gpu = "n/a" if res.gpu_clock_power is None else "{:,.0f} / {:.0f}".format(*res.gpu_clock_power)
        mem = "n/a" if res.mem_active is None else f"{res.mem_active:.1f} / {res.mem_reserved:.1f}"
        lines.append(
            f"| {res.variant.name} | {model} | {_layout(r, res.world)} | {prec}, attn {m['attention']} | "
            f"{'on' if r['compile']['enable'] else 'off'} | {ac} | {_batch(r, res.world)} | "
            f"{t['seq_len']} | {res.tps:,.0f} | {res.tflops:.0f} | {mfu} | "
            f"{mem} | {res.alloc_retries} | {res.final_loss:.4f} | "
            f"{gpu} |")
    return "\n".join(lines)


def extrapolate_tps(points: list[tuple[int, float]], target_layers: int) -> tuple[float, float]:
    """(per-layer per-token seconds, tokens/s/GPU at target_layers) from (n_layers, tokens/s/GPU).

    Per-token time is linear in depth, t(L) = a + b L (every layer costs the same; embedding,
    output and loss are the constant a): the shallowest and deepest runs give b, then t(target).
    """
    pts = sorted((int(layers), 1.0 / tps) for layers, tps in points)
    (l1, t1), (l2, t2) = pts[0], pts[-1]
    if l1 == l2:
        raise ValueError(f"extrapolation needs runs at two different depths, got only {l1} layers")
    slope = (t2 - t1) / (l2 - l1)
    return slope, 1.0 / (t1 + slope * (target_layers - l1))


def extrapolate(results: list[Result], target_layers: int = 80) -> list[str]:
    """One line per variant group: the depth extrapolation of ANCHORS.md section 3, stated as such."""
    out = []
    groups: dict[str, list[Result]] = {}
    for res in results:
        if res.variant.group:
            groups.setdefault(res.variant.group, []).append(res)
    for group, rs in groups.items():
        ran = [r for r in rs if r.ok]
        depths = [r.resolved["model"].get("overrides", {}).get("n_layers") for r in ran]
        if None in depths:
            out.append(f"{group}: no estimate: variant {ran[depths.index(None)].variant.name!r} does not set "
                       "model.overrides.n_layers")
            continue
        if len(set(depths)) < 2:
            out.append(f"{group}: no estimate: needs two depths that ran, got {sorted(set(depths))} "
                       f"({len(rs) - len(ran)} variant(s) failed)")
            continue
        slope, tps = extrapolate_tps([(d, r.tps) for d, r in zip(depths, ran)], target_layers)
        out.append(f"{group}: per-layer per-token time {slope:.3e} s; extrapolated to {target_layers} "
                   f"layers: {tps:,.0f} tokens/s/GPU (an estimate from {min(depths)} and {max(depths)} "
                   "layers)")
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


def _int_at_least(low: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = None
        if value is None or value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}")
        return value
    return parse


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = 0.0
    if not value > 0:
        raise argparse.ArgumentTypeError(f"must be a number of seconds > 0, got {text!r}")
    return value


# Keys this script sets on every launch (see train_argv): a user's value would be silently replaced.
RESERVED = {"training.steps": "use --warmup and --steps",
            "metrics.log_freq": "every step is logged: the measurement needs each one",
            "checkpoint.enable": "a benchmark saves no checkpoint",
            "run.name": "the run is named after the variant",
            "run.dump_folder": "run folders go to $TMPDIR/titankit_bench_*; --out keeps the logs",
            "profiling.enable_profiling": "use --profile",
            "profiling.profile_start_step": "--profile traces the steps after the measured ones",
            "profiling.profile_steps": "use --profile-steps"}


def reserved_override(overrides: list[str]) -> str | None:
    """The first `--section.key[=value]` that bench_train sets itself, as an error message."""
    if found := own_key_override(overrides, RESERVED):
        return f"{found[0]}: bench_train sets {found[1]} itself ({RESERVED[found[1]]})"
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter,
                                 allow_abbrev=False)  # unknown --section.key=value are overrides
    ap.add_argument("--suite", help="TOML file of [[variant]] tables")
    ap.add_argument("--config", help="a single config instead of a suite")
    ap.add_argument("--ngpu", type=_int_at_least(0), default=0,
                    help="processes per variant (default: all GPUs or 2)")
    ap.add_argument("--warmup", type=_int_at_least(0), default=5)
    ap.add_argument("--steps", type=_int_at_least(1), default=20, help="measured steps after warm-up")
    ap.add_argument("--out", help="write the markdown table (and logs beside it) here")
    ap.add_argument("--timeout", type=_positive_float, default=1800, help="seconds per variant")
    ap.add_argument("--profile", action="store_true",
                    help="profile --profile-steps extra steps after the measured ones; needs --out")
    ap.add_argument("--profile-steps", type=_int_at_least(1), default=3, help="steps traced with --profile")
    ap.add_argument("--traces", help="with --profile: keep each variant's Chrome traces in this folder")
    ap.add_argument("--only", metavar="REGEX",
                    help="run only the suite's variants whose name matches (re.search), e.g. 'local batch 4'")
    args, overrides = ap.parse_known_args(argv)
    if bool(args.suite) == bool(args.config):
        ap.error("give exactly one of --suite or --config")
    if args.profile and not args.out:
        ap.error("--profile needs --out (summaries go next to the logs)")
    if args.out and (Path(args.out).is_dir() or Path(args.out).with_suffix("") == Path(args.out)):
        ap.error(f"--out {args.out}: give a file name with a suffix, e.g. {args.out.rstrip('/')}.md "
                 "(the table goes there, the logs into the folder of the same name without it)")
    if args.out and Path(args.out).exists() and not os.access(args.out, os.W_OK):
        ap.error(f"--out {args.out}: not writable")
    if bad := reserved_override(overrides):
        ap.error(bad)
    if args.traces and not args.profile:
        ap.error("--traces only makes sense with --profile")
    try:
        variants = load_suite(args.suite) if args.suite else [
            Variant(name=Path(args.config).stem, config=args.config)]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for v in variants:
        if bad := reserved_override(v.overrides):
            print(f"error: {args.suite}: variant {v.name!r}: {bad}", file=sys.stderr)
            return 2
    if args.only is not None:
        try:
            pattern = re.compile(args.only)
        except re.error as err:
            ap.error(f"--only {args.only!r}: not a regular expression ({err})")
        kept = [v for v in variants if pattern.search(v.name)]
        if not kept:
            ap.error(f"--only {args.only!r} matches none of: " + "; ".join(v.name for v in variants))
        variants = kept
    for v in variants:
        v.ngpu = v.ngpu or args.ngpu
        v.overrides = [*v.overrides, *overrides]
    try:  # all of them, before any trains
        for v in variants:
            # The run folder is not checked (nothing is written); its real path comes below.
            check_variant(v, train_argv(v, args.warmup, args.steps, args.profile_steps if args.profile else 0,
                                        Path("unused")), f"{args.suite}: " if args.suite else "")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    log_dir = None
    if args.out:
        log_dir = Path(args.out).with_suffix("")
        try:  # before anything trains: a table that cannot be written loses the whole run
            log_dir.mkdir(parents=True, exist_ok=True)
            with open(args.out, "a"):
                pass
        except OSError as exc:
            ap.error(f"--out {args.out}: cannot write it ({exc.strerror})")
    trace_dir = Path(args.traces) if args.traces else None
    if trace_dir is not None:
        trace_dir.mkdir(parents=True, exist_ok=True)
    # Kept, and said where: the run folders (metrics.jsonl, config.toml) and, without --out, the logs
    # are what tells why a variant failed or timed out.
    workdir = Path(tempfile.mkdtemp(prefix="titankit_bench_"))
    print(f"run folders: {workdir}; logs: {log_dir or workdir}", flush=True)
    results: list[Result] = []
    env = environment()  # probed once (nvidia-smi), not at every rewrite of the table
    for v in variants:
        try:
            results.append(run_variant(v, args.warmup, args.steps, workdir, log_dir or workdir,
                                       args.timeout, args.profile_steps if args.profile else 0, trace_dir))
        except (KeyboardInterrupt, SystemExit) as exc:
            # The rows so far, and this one marked, in the table; the variants after it not run.
            results.append(Result(v, ok=False, error=f"interrupted ({stop_reason(exc)}); later "
                                  "variants not run"))
            if args.out:
                Path(args.out).write_text(report(results, args, env) + "\n")
            print(report(results, args, env), flush=True)
            raise
        if args.out:  # the rows so far survive a suite that is killed part-way
            Path(args.out).write_text(report(results, args, env) + "\n")
    text = report(results, args, env)
    print(text)
    return 0 if all(r.ok for r in results) else 1


def report(results: list[Result], args: argparse.Namespace, env: str) -> str:
    text = [f"Environment: {env}", f"Date: {time.strftime('%Y-%m-%d')}",
            f"Steps: {args.warmup} warm-up + {args.steps} measured"
            + (f" + {args.profile_steps} profiled (not measured; <variant>.profile.md)"
               if args.profile else ""),
            "", table(results)]
    text += [f"Variant {r.variant.name!r} ran with " + ", ".join(f"{k}={val}" for k, val in r.variant.env.items())
             for r in results if r.variant.env]
    extra = extrapolate(results)
    if extra:
        text += [""] + extra
    return "\n".join(text)


if __name__ == "__main__":
    sys.exit(main())
