"""Project measured training throughput onto another GPU: a model calibrated on measured runs.

    python scripts/project_hardware.py --bench docs/perf/2026-11-30_h200x2_70b_prof.md --target b200 \
        --fsdp 8 --layers 80

Input: the markdown table that `scripts/bench_train.py --profile --out X.md` wrote, and the
`X/<variant>.profile.md` summaries beside it (one profiled step per variant). The source GPU is the one
on X.md's `Environment:` line (a CPU bench or a GPU without figures below is refused). Every variant is split,
from its own profile, into tensor-core time (GEMMs, attention), memory-bound time (elementwise, norms,
copies, optimizer), exposed communication and device idle; each part is rescaled by the ratio of
the datasheet figure that bounds it on the source and target GPU:

- tensor-core time by the dense peak (FP8 peak for the GEMMs of FP8 runs), times --tc-efficiency,
  the fraction of the source's achieved share of peak the target is assumed to reach (1.0 = same
  share; new GPUs often reach less at first, so several values are printed);
- memory-bound time by the HBM bandwidth;
- communication by the NVLink bandwidth and by the FSDP volume per GPU, (N-1)/N of the parameters,
  for the --fsdp degree against the measured one; communication that the source hid under compute
  stays hidden only while it still fits under the target's (shorter) compute, the rest is exposed;
- device idle (host-bound time) unchanged.

Throughput is measured tokens/s/GPU x (source time / projected time). Layer stacks of one precision
are then extrapolated to --layers as bench_train does (per-token time linear in depth). The memory
check splits the measured growth per layer into sharded training state (16 bytes per parameter:
fp32 weights, gradients, two AdamW moments) and activations, and re-shards the state over --fsdp.

The result is a model: it ignores kernels that scale differently from their bound, inter-node
networks (FSDP beyond one NVLink domain) and anything the profile cannot see. Label it as such.
"""

from __future__ import annotations

import argparse
import math
import re
import sys
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# The names bench_train gives its files. scripts/ is not a package: import its module by directory
# (an installed package called "scripts" would shadow a namespace import).
sys.path.insert(0, str(ROOT / "scripts"))
from bench_train import file_stem  # noqa: E402
from report_out import prepare_out, write_out  # noqa: E402

GIB = 1024**3


@dataclass(frozen=True)
class Gpu:
    name: str
    bf16: float  # dense tensor-core FLOP/s
    fp8: float
    hbm: float  # bytes/s
    nvlink: float  # bytes/s per direction
    memory: float  # bytes usable by the framework (the datasheet's capacity)


# Datasheet figures (dense, SXM / HGX parts). B200 at its HGX 1,000 W configuration.
GPUS = {
    "h100": Gpu("H100 SXM", 989e12, 1979e12, 3.35e12, 450e9, 80e9),
    "h200": Gpu("H200 SXM", 989e12, 1979e12, 4.8e12, 450e9, 141e9),
    "b200": Gpu("B200 (HGX)", 2250e12, 4500e12, 8.0e12, 900e9, 180e9),
}

PARTS = {  # profile summary label prefix -> key
    "compute: GEMM": "gemm",
    "compute: attention": "attention",
    "compute: elementwise/norm/other": "elementwise",
    "optimizer (kernels": "optimizer",
    "communication (union": "comm",
    "**exposed communication**": "exposed",
    "memcpy/memset": "memcpy",
    "device idle": "idle",
}


@dataclass
class Row:
    variant: str
    model: str
    flavor: str
    layers: int | None
    fsdp: int
    fp8: bool
    tps: float
    mem_active_gib: float


# torch.cuda.get_device_name() as bench_train's Environment line quotes it -> key of GPUS. The figures
# above are SXM/HGX parts: a PCIe or NVL card has other clocks and links, so it is not matched.
DEVICE_NAMES = {r"\bH100\b(?!.*\b(PCIe|NVL)\b)": "h100", r"\bH200\b(?!.*\b(PCIe|NVL)\b)": "h200",
                r"\bB200\b": "b200"}


def source_gpu(path: Path) -> str:
    """The key of GPUS for the device on the bench file's 'Environment:' line (bench_train writes it)."""
    env = next((ln for ln in path.read_text().splitlines() if ln.startswith("Environment:")), None)
    if env is None:
        raise ValueError(f"{path}: no 'Environment:' line naming the GPU the bench ran on")
    m = re.search(r"\b\d+ x ([^,]+)", env)
    if not m:
        found = "a CPU" if "CPU" in env else "no GPU"
        raise ValueError(f"{path}: the Environment line names {found} ({env[len('Environment:'):].strip()}); "
                         "a projection needs a bench measured on one of: " + ", ".join(g.name for g in GPUS.values()))
    name = m[1].strip()
    key = next((k for pat, k in DEVICE_NAMES.items() if re.search(pat, name)), None)
    if key is None:
        raise ValueError(f"{path}: the bench ran on {name!r}, which has no datasheet figures here; known: "
                         + ", ".join(g.name for g in GPUS.values()))
    return key


def _gib(cell: str) -> float:
    """The active-memory half of an 'active / reserved' cell; a CPU bench writes n/a (NaN here)."""
    return math.nan if cell.strip() == "n/a" else float(cell.split("/")[0])


def parse_bench(path: Path) -> list[Row]:
    """The rows of a bench_train table that ran (failed rows have no numbers)."""
    lines = path.read_text().splitlines()
    try:
        start = next(i for i, ln in enumerate(lines) if ln.startswith("| variant |"))
    except StopIteration:
        raise ValueError(f"{path}: no bench_train table (a line starting '| variant |')") from None
    rows = []
    for ln in lines[start + 2:]:
        if not ln.startswith("|"):
            break
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        if len(cells) < 12 or cells[1].startswith("failed"):
            continue
        m = re.match(r"(\S+) (\S+)(?: \((\d+) layers\))?$", cells[1])
        if not m:
            raise ValueError(f"{path}: model cell {cells[1]!r} of {cells[0]!r} is not '<name> <flavor> [(N layers)]'")
        fsdp = re.search(r"fsdp(\d+)", cells[2])
        rows.append(Row(cells[0], m[1], m[2], int(m[3]) if m[3] else None, int(fsdp[1]) if fsdp else 1,
                        cells[3].startswith("fp8"), float(cells[8].replace(",", "")),
                        _gib(cells[11])))
    if not rows:
        raise ValueError(f"{path}: the table has no variant that ran")
    return rows


def parse_profile(path: Path) -> dict[str, float]:
    """Step time and its parts (ms per step) from a trainer.profiling summary.md (first device)."""
    try:
        return parse_profile_text(path.read_text())
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None


def parse_profile_text(text: str) -> dict[str, float]:
    m = re.search(r"Average step time: ([\d,.]+) ms", text)
    if not m:
        raise ValueError("no 'Average step time' line; is it a profile summary.md?")
    out = {"step": float(m[1].replace(",", ""))}
    for ln in text.splitlines():
        cells = [c.strip() for c in ln.strip().strip("|").split("|")]
        for label, key in PARTS.items():
            if len(cells) >= 2 and cells[0].startswith(label) and key not in out:
                out[key] = float(cells[1].replace(",", ""))
    missing = [k for k in PARTS.values() if k not in out]
    if missing:
        raise ValueError(f"the profile lacks {', '.join(missing)}")
    return out


def time_ratio(p: dict[str, float], src: Gpu, dst: Gpu, fp8: bool, fsdp_from: int, fsdp_to: int,
               tc_eff: float) -> float:
    """Projected step time on `dst` / measured step time on `src`, from one profile."""
    kernel = p["gemm"] + p["attention"] + p["elementwise"] + p["optimizer"] + p["memcpy"]
    compute = max(p["step"] - p["exposed"] - p["idle"], 0.0)  # time some compute kernel ran
    gemm_speedup = (dst.fp8 / src.fp8 if fp8 else dst.bf16 / src.bf16) * tc_eff
    attn_speedup = dst.bf16 / src.bf16 * tc_eff  # attention runs in bf16 in both precisions
    mem_speedup = dst.hbm / src.hbm
    per_ms = (p["gemm"] / gemm_speedup + p["attention"] / attn_speedup
              + (kernel - p["gemm"] - p["attention"]) / mem_speedup) / kernel if kernel else 1.0
    compute_dst = compute * per_ms
    vol = ((fsdp_to - 1) / fsdp_to) / ((fsdp_from - 1) / fsdp_from) if fsdp_from > 1 and fsdp_to > 1 else 1.0
    net = vol * src.nvlink / dst.nvlink
    exposed_dst = p["exposed"] * net
    hidden_dst = max(p["comm"] - p["exposed"], 0.0) * net
    exposed_dst += max(hidden_dst - compute_dst, 0.0)  # what no longer fits under compute
    return (compute_dst + exposed_dst + p["idle"]) / p["step"]


def params_per_layer(model: str, flavor: str) -> tuple[int, int]:
    """(parameters outside the blocks, parameters per block) of a model family's flavor."""
    from trainer.models import FAMILIES

    fam = FAMILIES[model]
    one, two = (fam.make_args(flavor, {"n_layers": n}).num_params() for n in (1, 2))
    return one - (two - one), two - one


def depth_fit(points: list[tuple[int, float]]) -> tuple[float, float]:
    """(intercept, slope) of a line through the shallowest and deepest (layers, value) points."""
    pts = sorted(points)
    (l1, v1), (l2, v2) = pts[0], pts[-1]
    slope = (v2 - v1) / (l2 - l1)
    return v1 - slope * l1, slope


def report(rows: list[Row], profiles: dict[str, dict[str, float]], src: Gpu, dst: Gpu, fsdp: int,
           layers: int, effs: list[float], command: str) -> str:
    head = "| variant | measured on " + src.name + " tokens/s/GPU | " + " | ".join(
        f"projected {dst.name}, FSDP {fsdp}, tc-eff {e:g}" for e in effs) + " |"
    out = [f"Projection (a model, not a measurement) from {src.name} to {dst.name}", "",
           f"Command: `{command}`", "", head, "|" + "---|" * (2 + len(effs))]
    proj: dict[str, list[float]] = {}
    for r in rows:
        ratios = [time_ratio(profiles[r.variant], src, dst, r.fp8, r.fsdp, fsdp, e) for e in effs]
        proj[r.variant] = [r.tps / x for x in ratios]
        out.append(f"| {r.variant} | {r.tps:,.0f} | " + " | ".join(f"{t:,.0f}" for t in proj[r.variant]) + " |")
    groups: dict[tuple[str, str, bool], list[Row]] = {}
    for r in rows:
        if r.layers is not None:
            groups.setdefault((r.model, r.flavor, r.fp8), []).append(r)
    for (model, flavor, fp8), rs in groups.items():
        if len({r.layers for r in rs}) < 2:
            continue
        label = f"{model} {flavor} {'fp8' if fp8 else 'bf16'}"
        meas = depth_fit([(r.layers, 1 / r.tps) for r in rs])
        line = [f"{label}, {layers} layers (per-layer extrapolation): measured-based {1 / (meas[0] + meas[1] * layers):,.0f}"]
        for i, e in enumerate(effs):
            a, b = depth_fit([(r.layers, 1 / proj[r.variant][i]) for r in rs])
            line.append(f"projected (tc-eff {e:g}) {1 / (a + b * layers):,.0f}")
        out += ["", "; ".join(line) + " tokens/s/GPU"]
        out.append(memory_line(rs, model, flavor, src, dst, fsdp, layers))
    return "\n".join(out)


def memory_line(rs: list[Row], model: str, flavor: str, src: Gpu, dst: Gpu, fsdp: int, layers: int) -> str:
    p0, pl = params_per_layer(model, flavor)
    a, b = depth_fit([(r.layers, r.mem_active_gib * GIB) for r in rs])
    n = rs[0].fsdp
    act_layer, act_rest = b - 16 * pl / n, a - 16 * p0 / n
    state = 16 * (p0 + layers * pl)  # bytes of training state of the whole model
    acts = act_rest + layers * act_layer  # per GPU whatever the FSDP degree
    need = acts + state / fsdp
    if need <= dst.memory:
        verdict = "fits"
    elif acts >= dst.memory:
        verdict = "does NOT fit at any FSDP degree (the activations alone exceed it)"
    else:
        verdict = (f"does NOT fit; FSDP >= {math.ceil(state / (dst.memory - acts))} would (beyond one node: "
                   "its network is not in this model)")
    return (f"Memory at {layers} layers, FSDP {fsdp} (measured max active split into 16 B/param of sharded state and "
            f"activations: {act_layer / GIB:.2f} GiB per layer, {act_rest / GIB:.1f} GiB outside the layers): "
            f"{need / GIB:.0f} GiB per GPU against {dst.memory / GIB:.0f} GiB on {dst.name}: {verdict}.")


def _loose(name: str) -> str:
    """bench_train's file name with every run of underscores as one separator."""
    return re.sub("_+", "_", file_stem(name))


def profile_file(folder: Path, variant: str) -> Path:
    """The <variant>.profile.md that bench_train wrote into `folder`. Matched loosely (any run of
    punctuation, spaces and underscores counts as one separator): tables written before 2026-12-01
    kept commas in these names, and some were renamed with underscores for file transfer."""
    key = _loose(variant)
    found = sorted(f for f in folder.glob("*.profile.md") if _loose(f.name[: -len(".profile.md")]) == key)
    if len(found) > 1:
        raise ValueError(f"{folder}: profiles {[f.name for f in found]} all match variant {variant!r}")
    return found[0] if found else folder / f"{file_stem(variant)}.profile.md"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bench", required=True, help="bench_train --profile --out file (X.md, with X/ beside it)")
    ap.add_argument("--source", choices=sorted(GPUS),
                    help="optional check: the GPU is read from the bench file's Environment line; "
                    "a --source that differs is refused")
    ap.add_argument("--target", required=True, choices=sorted(GPUS))
    ap.add_argument("--fsdp", type=int, default=8, help="FSDP degree on the target (one NVLink domain)")
    ap.add_argument("--layers", type=int, default=80, help="depth to extrapolate layer stacks to")
    ap.add_argument("--tc-efficiency", type=fraction, nargs="+", default=[1.0, 0.8],
                    help="fractions in (0, 1] of the source's achieved share of tensor-core peak")
    ap.add_argument("--out", help="also write the report here (its folder is created)")
    args = ap.parse_args(argv)
    if args.fsdp < 1 or args.layers < 1:
        ap.error("--fsdp and --layers must be >= 1")
    try:
        out = prepare_out(args.out) if args.out else None
        text = project(args, "python scripts/project_hardware.py " + " ".join(sys.argv[1:] if argv is None else argv))
        print(text)
        if out:
            write_out(out, text)
    except ValueError as err:  # bad input files: one line naming the file, not a traceback
        ap.error(str(err))
    return 0


def fraction(text: str) -> float:
    """argparse type of --tc-efficiency: a number in (0, 1]."""
    try:
        x = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if not 0 < x <= 1:
        raise argparse.ArgumentTypeError(f"{text} is not a fraction in (0, 1] (1.0 = the source's share of peak)")
    return x


def project(args: argparse.Namespace, command: str) -> str:
    """The report for parsed arguments; ValueError naming the file for any input it cannot use."""
    bench = Path(args.bench)
    if bench.is_dir():
        raise ValueError(f"--bench {bench}: is a folder; pass the X.md that bench_train --profile --out X.md "
                         "wrote beside its X/ folder")
    if not bench.is_file():
        raise ValueError(f"--bench {bench}: no such file (the X.md of bench_train --profile --out X.md)")
    rows = parse_bench(bench)
    source = source_gpu(bench)
    if args.source and args.source != source:
        raise ValueError(f"--source {args.source}: {bench} was measured on {GPUS[source].name}; "
                         f"drop --source or pass --source {source}")
    folder = bench.with_suffix("")
    profiles = {}
    for r in rows:
        f = profile_file(folder, r.variant)
        if not f.is_file():
            raise ValueError(f"{f}: missing; run bench_train with --profile --out {bench} to write it")
        profiles[r.variant] = parse_profile(f)
    return report(rows, profiles, GPUS[source], GPUS[args.target], args.fsdp, args.layers,
                  args.tc_efficiency, command)


if __name__ == "__main__":
    sys.exit(main())
