"""Step profiling: torch.profiler traces of a window of steps, and a summary of where the time goes.

    [profiling]
    enable_profiling = true        # trace steps profile_start_step .. + profile_steps - 1
    profile_start_step = 5
    profile_steps = 3

writes into {run folder}/{save_traces_folder}/step-N/ (N = the last traced step):

    rank{r}_trace.json.gz            every rank's Chrome trace (chrome://tracing or ui.perfetto.dev)
    rank{r}_memory_snapshot.pickle   with enable_memory_snapshot, on CUDA (pytorch.org/memory_viz)
    summary.md                       rank 0: the step time split into compute (and FSDP's own copies
                                     and casts within it), communication (and how much of it is
                                     exposed), optimizer and data loading; top kernels

The Trainer marks three regions with record_function: "data", "forward_backward", "optimizer";
FSDP2 marks its own ("FSDP::all_gather", "FSDP::post_backward_reduce", ...).
`python -m trainer.profiling TRACE.json[.gz]` prints the summary of any saved trace again.
"""

from __future__ import annotations

import bisect
import gzip
import json
import os
import re
import sys
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

import torch

from trainer.config.schema import JobConfig, Profiling
from trainer.log import logger

Interval = tuple[float, float]  # (start, end) in microseconds, the Chrome trace's unit

REGIONS = ("data", "forward_backward", "optimizer")
# Rows of the breakdown, in print order. Compute rows partition the compute kernels.
COMPUTE = ("GEMM", "attention", "elementwise/norm/other", "optimizer")
COMM_KINDS = ("all-gather", "reduce-scatter", "all-reduce", "send/recv", "all-to-all", "broadcast",
              "other comm")

# Name patterns, matched on the lower-cased kernel (or CPU operator) name, first match wins.
# NCCL kernels: ncclDevKernel_AllGather_RING_LL, ncclKernel_ReduceScatter_..., ncclDevKernel_SendRecv;
# gloo/c10d operators on CPU: c10d::allreduce_, c10d::_allgather_base_; symmetric-memory kernels
# (async TP): multimem_*, one_shot_all_reduce, two_shot_all_reduce.
_COMM = re.compile(r"nccl|gloo|c10d::|all_?gather|reduce_?scatter|all_?reduce|all_?to_?all|"
                   r"sendrecv|multimem|symm_?mem|one_shot|two_shot")
_COMM_KIND = (("all-gather", re.compile(r"all_?gather")),
              ("reduce-scatter", re.compile(r"reduce_?scatter")),
              ("all-reduce", re.compile(r"all_?reduce|one_shot|two_shot|multimem")),
              ("all-to-all", re.compile(r"all_?to_?all")),
              ("send/recv", re.compile(r"sendrecv|send|recv")),
              ("broadcast", re.compile(r"broadcast")))
# Attention before GEMM: cuDNN/flash attention kernel names also contain "sm90" or "gemm"-like parts.
_ATTENTION = re.compile(r"flash|fmha|attention|attn|sdpa|flex")
_GEMM = re.compile(r"gemm|xmma|cutlass|nvjet|cublas|matmul|scaled_mm|grouped_(mm|dw)|"
                   r"triton_tem_fused_\w*mm|aten::(addmm|mm|bmm|baddbmm)$")


# ---- interval arithmetic ---------------------------------------------------------------------
def union_intervals(intervals: Iterable[Interval]) -> list[Interval]:
    """Sorted, disjoint intervals covering exactly the points of the input (empty ones dropped)."""
    out: list[list[float]] = []
    for s, e in sorted(iv for iv in intervals if iv[1] > iv[0]):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return [(s, e) for s, e in out]


def total_length(intervals: Iterable[Interval]) -> float:
    """Length of the union of the intervals (overlaps counted once)."""
    return sum(e - s for s, e in union_intervals(intervals))


def exposed_length(comm: Iterable[Interval], compute: Iterable[Interval]) -> float:
    """Time covered by `comm` and not by `compute`: |union(comm) - union(compute)|.

    This is the communication the device waits for; comm that runs while any compute kernel runs
    on the same device is hidden (overlapped).
    """
    a, b = union_intervals(comm), union_intervals(compute)
    covered, j = 0.0, 0
    for s, e in a:
        # b is sorted and disjoint: skip the compute intervals that end before this comm interval.
        while j < len(b) and b[j][1] <= s:
            j += 1
        k = j
        while k < len(b) and b[k][0] < e:
            covered += min(e, b[k][1]) - max(s, b[k][0])
            k += 1
    return sum(e - s for s, e in a) - covered


# ---- kernel classification -------------------------------------------------------------------
def kernel_category(name: str) -> str:
    """'comm', 'attention', 'GEMM' or 'elementwise/norm/other' from a kernel or CPU operator name."""
    low = name.lower()
    if _COMM.search(low):
        return "comm"
    if _ATTENTION.search(low):
        return "attention"
    if _GEMM.search(low):
        return "GEMM"
    return "elementwise/norm/other"


def comm_kind(name: str) -> str:
    """The collective of a communication kernel (NCCL runs all-to-all as send/recv kernels)."""
    low = name.lower()
    for kind, pattern in _COMM_KIND:
        if pattern.search(low):
            return kind
    return "other comm"


@dataclass
class Kernel:
    name: str
    intervals: list[Interval]  # us; one for a GPU kernel, the self-time pieces of a CPU operator
    device: str  # "cuda:0" or "cpu"
    category: str  # a COMPUTE row, "comm" or "memcpy/memset"
    fsdp: bool = False  # launched by FSDP2's own code (its "FSDP::..." regions): copies and casts

    @property
    def duration(self) -> float:
        return sum(e - s for s, e in self.intervals)


def _complete(events: list[dict], cats: tuple[str, ...]) -> list[dict]:
    return [e for e in events if e.get("ph") == "X" and e.get("cat") in cats and "dur" in e]


class _Regions:
    """Disjoint sorted intervals with a logarithmic membership test (traces hold ~1e5 launches)."""

    def __init__(self, intervals: Iterable[Interval]):
        merged = union_intervals(intervals)
        self.starts = [s for s, _ in merged]
        self.ends = [e for _, e in merged]

    def __contains__(self, t: float) -> bool:
        i = bisect.bisect_right(self.starts, t) - 1
        return i >= 0 and t <= self.ends[i]


def fsdp_regions(events: list[dict]) -> dict[tuple, _Regions]:
    """FSDP2's record_function regions ("FSDP::all_gather", "FSDP::post_backward_reduce", ...) per
    CPU thread: work launched inside them is FSDP's own (all-gather copy-in and casts, copy-out,
    reduce-scatter copy-in), not the model's. Per thread, because backward's hooks run on autograd's
    thread while other threads may launch at the same time."""
    per_thread: dict[tuple, list[Interval]] = defaultdict(list)
    for e in _complete(events, ("user_annotation",)):
        if e["name"].startswith("FSDP::"):
            per_thread[(e.get("pid"), e.get("tid"))].append((e["ts"], e["ts"] + e["dur"]))
    return {thread: _Regions(ivs) for thread, ivs in per_thread.items()}


def _in_fsdp(e: dict, fsdp: dict[tuple, _Regions]) -> bool:
    regions = fsdp.get((e.get("pid"), e.get("tid")))
    return regions is not None and e["ts"] in regions


def _self_intervals(ops: list[dict]) -> list[list[Interval]]:
    """Per operator of one thread, its self time: its interval minus those of its direct children."""
    order = sorted(range(len(ops)), key=lambda i: (ops[i]["ts"], -ops[i]["dur"]))
    children: list[list[Interval]] = [[] for _ in ops]
    stack: list[int] = []
    for i in order:
        s = ops[i]["ts"]
        while stack and ops[stack[-1]]["ts"] + ops[stack[-1]]["dur"] <= s:
            stack.pop()
        if stack:
            children[stack[-1]].append((s, s + ops[i]["dur"]))
        stack.append(i)
    out = []
    for op, kids in zip(ops, children):
        cursor, end, pieces = op["ts"], op["ts"] + op["dur"], []
        for s, e in kids:  # already in start order
            if s > cursor:
                pieces.append((cursor, min(s, end)))
            cursor = max(cursor, e)
        if end > cursor:
            pieces.append((cursor, end))
        out.append(pieces)
    return out


def trace_kernels(events: list[dict], optimizer_regions: list[Interval]
                  ) -> tuple[list[Kernel], str, list[Kernel], int]:
    """The device work of a trace, where it came from ("cuda" or "cpu"), the work left out, and how
    many kernel launches of the window never ran inside it (cut off when the trace stopped).

    CUDA: kernels, memcpys and memsets from CUPTI. A kernel whose launch (the CUDA runtime/driver
    call with the same correlation id) lies inside the "optimizer" region counts as optimizer. Work
    whose launch is not in the trace was queued before the traced window opened (the GPU runs
    behind the CPU, often by most of a step): it belongs to an earlier step and is left out, else
    the traced steps would be charged with, e.g., the previous step's optimizer as elementwise work.
    CPU-only traces have no kernels: the CPU operators' self times (time not spent in an operator
    nested inside) stand in for kernels, so the same breakdown still adds up without a GPU.
    """
    gpu = _complete(events, ("kernel", "gpu_memcpy", "gpu_memset"))
    fsdp = fsdp_regions(events)
    optimizer = _Regions(optimizer_regions)
    if gpu:
        runtime = _complete(events, ("cuda_runtime", "cuda_driver"))
        launch = {e["args"]["correlation"]: e["ts"] for e in runtime if "correlation" in e.get("args", {})}
        by_fsdp = {e["args"]["correlation"] for e in runtime
                   if "correlation" in e.get("args", {}) and _in_fsdp(e, fsdp)}
        out, earlier = [], []
        seen = {e.get("args", {}).get("correlation") for e in gpu}
        cut = sum(1 for e in runtime
                  if "Launch" in e["name"] and e.get("args", {}).get("correlation") not in seen)
        for e in gpu:
            args = e.get("args", {})
            if "correlation" in args and args["correlation"] not in launch:
                earlier.append(Kernel(e["name"], [(e["ts"], e["ts"] + e["dur"])],
                                      f"cuda:{args.get('device', e.get('pid'))}", "earlier"))
                continue
            if e["cat"] != "kernel":
                cat = "memcpy/memset"
            else:
                cat = kernel_category(e["name"])
                t = launch.get(args.get("correlation"))
                if cat != "comm" and t is not None and t in optimizer:
                    cat = "optimizer"
            out.append(Kernel(e["name"], [(e["ts"], e["ts"] + e["dur"])],
                              f"cuda:{args.get('device', e.get('pid'))}", cat,
                              fsdp=args.get("correlation") in by_fsdp))
        return out, "cuda", earlier, cut
    by_thread: dict[Any, list[dict]] = defaultdict(list)
    for e in _complete(events, ("cpu_op",)):
        by_thread[(e.get("pid"), e.get("tid"))].append(e)
    out = []
    for ops in by_thread.values():
        for e, pieces in zip(ops, _self_intervals(ops)):
            cat = kernel_category(e["name"])
            if cat != "comm" and e["ts"] in optimizer:
                cat = "optimizer"
            out.append(Kernel(e["name"], pieces, "cpu", cat, fsdp=_in_fsdp(e, fsdp)))
    return out, "cpu", [], 0


# ---- the summary -----------------------------------------------------------------------------
def _ms(us: float) -> str:
    return f"{us / 1e3:,.2f}"


def _pct(us: float, step_us: float) -> str:
    return f"{100.0 * us / step_us:.1f}%"


_NOISE = re.compile(r"\bvoid |\(anonymous namespace\)::|\b(?:at::native::|at::cuda::|at::|c10::|detail::)")
# Template arguments that say what a generic kernel computes: multi_tensor_apply_kernel runs every
# foreach op and the fused optimizers, told apart only by their functor (FusedAdamMathFunctor,
# LpNormFunctor, BinaryOpScalarFunctor + std::multiplies, ...).
_TELLING = re.compile(r"\b(\w+Functor|std::\w+|\w+_kernel_cuda|\w+Op)\b")


def kernel_label(name: str, width: int = 90) -> str:
    """A table cell for a kernel: namespaces dropped; a long templated name becomes its base name plus
    the template arguments that tell it apart, e.g. multi_tensor_apply_kernel<FusedAdamMathFunctor>."""
    name = _NOISE.sub("", name.replace("|", "/")).strip()
    if len(name) <= width:
        return name
    base, _, args = name.partition("<")
    tags = list(dict.fromkeys(_TELLING.findall(args)))[:3]
    if tags:
        name = f"{base}<{', '.join(tags)}>"
    return name if len(name) <= width else name[: width - 3] + "..."


def _device_rows(ks: list[Kernel], n: int, step_us: float, data_us: float) -> list[str]:
    """The breakdown table of one device; times per step (n steps of step_us on average)."""
    def iv(*cats: str) -> list[Interval]:
        return [i for k in ks if k.category in cats for i in k.intervals]

    def row(label: str, us: float) -> str:
        return f"| {label} | {_ms(us)} | {_pct(us, step_us)} |"

    compute = iv(*COMPUTE)
    rows = ["| part | ms/step | % of step |", "|---|---|---|"]
    for cat in COMPUTE:
        label = f"compute: {cat}" if cat != "optimizer" else \
            "optimizer (kernels launched in the optimizer region)"
        rows.append(row(label, sum(k.duration for k in ks if k.category == cat) / n))
        if cat == "elementwise/norm/other":
            rows.append(row("of which FSDP's copies and casts (launched in its FSDP:: regions)",
                            sum(k.duration for k in ks if k.category == cat and k.fsdp) / n))
            # Whether FSDP's copies cost the step depends on what runs beside them: on its side
            # streams they hide under the GEMMs; on a one-rank mesh FSDP2 casts on the compute
            # stream, where nothing does (docs/benchmarks.md 2f).
            fsdp_work = [i for k in ks if k.fsdp and k.category in (cat, "memcpy/memset")
                         for i in k.intervals]
            others = [i for k in ks if k.category in COMPUTE and not k.fsdp for i in k.intervals]
            rows.append(row("FSDP's copies, casts and memcpys with no other compute kernel running",
                            exposed_length(fsdp_work, others) / n))
    busy = total_length(iv(*COMPUTE, "comm", "memcpy/memset")) / n
    idle = max(step_us - busy, 0.0)
    rows += [row("communication (union of comm kernels)", total_length(iv("comm")) / n),
             row("**exposed communication** (comm with no compute kernel running)",
                 exposed_length(iv("comm"), compute) / n),
             row("memcpy/memset", sum(k.duration for k in ks if k.category == "memcpy/memset") / n),
             row("data loading (CPU region 'data')", data_us),
             row("device busy (union of all device work)", busy),
             row("device idle (step time - busy)", idle)]
    comm = [k for k in ks if k.category == "comm"]
    if comm:
        rows += ["", "| collective | kernels/step | ms/step | exposed ms/step |", "|---|---|---|---|"]
        for kind in COMM_KINDS:
            calls = [k for k in comm if comm_kind(k.name) == kind]
            mine = [i for k in calls for i in k.intervals]
            if calls:
                rows.append(f"| {kind} | {len(calls) / n:g} | {_ms(total_length(mine) / n)} | "
                            f"{_ms(exposed_length(mine, compute) / n)} |")
    return rows


def summarize_trace(trace: dict, title: str = "profile", top: int = 20) -> str:
    """Markdown: per device, the step time split into compute / comm (exposed) / optimizer / data.

    Times are per step, averaged over the traced steps (the ProfilerStep#k regions torch.profiler
    writes). Compute rows sum kernel time (kernels of concurrent streams may overlap); 'busy' is
    the union of all device work, so overlaps count once there.
    """
    events = trace.get("traceEvents")
    if not isinstance(events, list):
        raise ValueError(f"{title}: not a Chrome trace (no traceEvents list)")
    notes = _complete(events, ("user_annotation",))
    steps = [(e["ts"], e["ts"] + e["dur"]) for e in notes if e["name"].startswith("ProfilerStep#")]
    regions = {r: [(e["ts"], e["ts"] + e["dur"]) for e in notes if e["name"] == r] for r in REGIONS}
    if regions["forward_backward"]:
        # A run that stops inside the window leaves the next ProfilerStep open but empty: a step
        # is a ProfilerStep region in which the trainer ran forward_backward.
        steps = [(s, e) for s, e in steps if any(s <= f <= e for f, _ in regions["forward_backward"])]
    if not steps:
        raise ValueError(f"{title}: no ProfilerStep#k regions; profile with a torch.profiler schedule "
                         "and call prof.step() after every step")
    n = len(steps)
    step_us = sum(e - s for s, e in steps) / n
    region_us = {r: sum(e - s for s, e in regions[r]) / n for r in REGIONS}
    kernels, source, earlier, cut = trace_kernels(events, regions["optimizer"])

    origin = "CUDA kernels (CUPTI)." if source == "cuda" else \
        "CPU operators' self time (no CUDA in this trace; it stands in for kernels)."
    lines = [f"# {title}", "", f"Average step time: {_ms(step_us)} ms over {n} traced step(s).",
             f"Device work from {origin}"]
    if earlier:
        lines.append(f"Left out: {len(earlier)} kernels/copies ({_ms(sum(k.duration for k in earlier))} ms) "
                     "launched before the traced window (queued work of an earlier step).")
    if cut:
        lines.append(f"Cut off: {cut} kernel launches of the traced steps ran after the trace stopped "
                     "(their time is missing here).")
    lines += ["", "## CPU regions (wall time per step)", "",
             "| region | ms/step | % of step |", "|---|---|---|"]
    for r in REGIONS:
        label = "data loading" if r == "data" else r
        lines.append(f"| {label} | {_ms(region_us[r])} | {_pct(region_us[r], step_us)} |")
    for dev in sorted({k.device for k in kernels}):
        lines += ["", f"## Where the time goes on {dev} (per step)", ""]
        lines += _device_rows([k for k in kernels if k.device == dev], n, step_us, region_us["data"])

    totals: dict[str, list] = {}
    for k in kernels:
        row = totals.setdefault(k.name, [0, 0.0, k.category])
        row[0] += 1
        row[1] += k.duration
    ranked = sorted(totals.items(), key=lambda kv: -kv[1][1])[:top]
    lines += ["", f"## Top {len(ranked)} {'kernels' if source == 'cuda' else 'CPU operators'} by self "
              "device time (all devices)", "",
              "| # | name | category | calls/step | ms/step | % of step |", "|---|---|---|---|---|---|"]
    for i, (name, (calls, us, cat)) in enumerate(ranked, 1):
        lines.append(f"| {i} | {kernel_label(name)} | {cat} | {calls / n:g} | {_ms(us / n)} | "
                     f"{_pct(us / n, step_us)} |")
    return "\n".join(lines) + "\n"


def load_trace(path: str | Path) -> dict:
    """A Chrome trace from .json or .json.gz."""
    path = Path(path)
    if not path.is_file():
        raise ValueError(f"{path}: no such trace file")
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rt") as f:
        return json.load(f)


# ---- the profiler the Trainer drives ---------------------------------------------------------
def check_profiling_config(cfg: JobConfig) -> None:
    """ValueError for a [profiling] window that cannot be traced."""
    p = cfg.profiling  # its values' own ranges: trainer/config/checks.py
    last = p.profile_start_step + p.profile_steps - 1
    if (p.enable_profiling or p.enable_memory_snapshot) and last > cfg.training.steps:
        raise ValueError(
            f"profiling.profile_start_step = {p.profile_start_step} with profiling.profile_steps = "
            f"{p.profile_steps} ends at step {last}, after training.steps = {cfg.training.steps}; "
            f"lower profile_start_step to <= {cfg.training.steps - p.profile_steps + 1} "
            "or raise training.steps")


class StepProfiler:
    """Traces steps [profile_start_step, + profile_steps) of a run; inert when [profiling] is off.

    Call `step(n)` after train step n finishes and `close()` after the loop. The torch profiler is
    only created one step before the window (its warm-up step, traced but discarded), so the steps
    before it run without any profiler overhead. Files are written to a hidden temporary name and
    renamed, so a reader never sees half a trace.
    """

    def __init__(self, cfg: JobConfig, run_dir: Path, rank: int, world_size: int, device: torch.device,
                 current_step: int = 0):
        # The window was checked by validate_config (check_profiling_config) before start-up.
        p: Profiling = cfg.profiling
        self.cfg, self.rank, self.world_size, self.device = p, rank, world_size, device
        self.root = Path(run_dir) / p.save_traces_folder
        self.first, self.last = p.profile_start_step, p.profile_start_step + p.profile_steps - 1
        self.trace = p.enable_profiling
        self.memory = p.enable_memory_snapshot and device.type == "cuda"
        if p.enable_memory_snapshot and not self.memory:
            logger.warning(f"profiling.enable_memory_snapshot needs CUDA; skipped on {device.type}")
        if (self.trace or self.memory) and current_step >= self.first:
            logger.warning(f"profiling: the run starts after step {current_step} (resumed), past "
                           f"profiling.profile_start_step = {self.first}; nothing is profiled")
            self.trace = self.memory = False
        # One warm-up step before the window when there is one (torch.profiler's advice).
        self.warmup = 1 if self.first - 1 > current_step else 0
        self._prof: torch.profiler.profile | None = None
        self._recording_memory = False
        self._discard = False  # set when the run ends inside the profiler's warm-up step
        self._step = current_step
        self._maybe_begin(current_step + 1)

    def _maybe_begin(self, next_step: int) -> None:
        if self.trace and self._prof is None and next_step == self.first - self.warmup:
            activities = [torch.profiler.ProfilerActivity.CPU]
            if self.device.type == "cuda" and torch.cuda.is_available():
                activities.append(torch.profiler.ProfilerActivity.CUDA)
            self._prof = torch.profiler.profile(
                activities=activities,
                schedule=torch.profiler.schedule(wait=0, warmup=self.warmup,
                                                 active=self.last - self.first + 1, repeat=1),
                on_trace_ready=self._save_trace, record_shapes=self.cfg.record_shapes)
            self._prof.start()
        if self.memory and not self._recording_memory and next_step == self.first:
            torch.cuda.memory._record_memory_history(max_entries=200_000)
            self._recording_memory = True

    def step(self, step: int) -> None:
        """Train step `step` (1-based) has finished."""
        self._step = step
        if self._prof is not None:
            if step >= self.last and self.device.type == "cuda":
                # The GPU runs behind the CPU: let the last traced step's kernels (its optimizer)
                # finish, or the trace stops before they run and their time is missing.
                torch.cuda.synchronize(self.device)
            self._prof.step()  # after the last traced step this calls _save_trace
            if step >= self.last:
                self._prof.stop()
                self._prof = None
        if self._recording_memory and step >= self.last:
            self._dump_memory()
        self._maybe_begin(step + 1)

    def writes_at(self, step: int) -> bool:
        """Whether step(`step`) ends the window and writes its trace or memory snapshot."""
        return (self._prof is not None or self._recording_memory) and step >= self.last

    def close(self) -> None:
        """End of training: a window cut short by the end of the run is saved as far as it got."""
        if self._prof is not None and self._step < self.first:
            self._discard = True  # only the warm-up step ran: there is nothing to save
            self._prof.stop()
            self._prof = None
        if self._prof is not None:
            logger.warning(f"profiling: the run ended at step {self._step}, inside the profiling window "
                           f"{self.first}-{self.last}; saving what was traced")
            self._prof.stop()
            self._prof = None
        if self._recording_memory:
            self._dump_memory()

    def _folder(self) -> Path:
        folder = self.root / f"step-{self._step}"
        folder.mkdir(parents=True, exist_ok=True)
        return folder

    def _dump_memory(self) -> None:
        folder = self._folder()
        final = folder / f"rank{self.rank}_memory_snapshot.pickle"
        tmp = folder / f".{final.name}.tmp"
        torch.cuda.memory._dump_snapshot(str(tmp))
        torch.cuda.memory._record_memory_history(enabled=None)
        self._recording_memory = False
        os.replace(tmp, final)
        logger.info(f"profiling: memory snapshot of steps {self.first}-{self._step} in {final}")

    def _save_trace(self, prof: torch.profiler.profile) -> None:
        if self._discard:
            return
        folder = self._folder()
        raw = folder / f".rank{self.rank}_trace.json.tmp"
        prof.export_chrome_trace(str(raw))
        final = folder / f"rank{self.rank}_trace.json.gz"
        gz_tmp = folder / f".{final.name}.tmp"
        with open(raw, "rb") as src, gzip.open(gz_tmp, "wb", compresslevel=4) as dst:
            while chunk := src.read(1 << 24):
                dst.write(chunk)
        os.replace(gz_tmp, final)
        steps = f"{self.first}-{self._step}" if self._step > self.first else f"{self.first}"
        if self.rank == 0:
            title = (f"Profile of steps {steps}, rank 0 of {self.world_size} "
                     f"({torch.cuda.get_device_name(self.device) if self.device.type == 'cuda' else 'cpu'})")
            with open(raw) as f:
                text = summarize_trace(json.load(f), title)
            tmp = folder / ".summary.md.tmp"
            tmp.write_text(text)
            os.replace(tmp, folder / "summary.md")
            logger.info(f"profiling: traces of steps {steps} and summary.md in {folder}")
        raw.unlink()


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1 or argv[0].startswith("-"):
        print("usage: python -m trainer.profiling TRACE.json[.gz]  (prints the time breakdown)",
              file=sys.stderr)
        return 2
    try:
        print(summarize_trace(load_trace(argv[0]), f"Profile {argv[0]}"), end="")
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
