"""Checkpoint benchmark on the real Trainer: blocking vs async save time, overlap, exact resume.

    torchrun --standalone --nproc_per_node=2 scripts/bench_checkpoint.py --config configs/llama3_8b.toml \
        --fit-seconds 240 --out docs/perf/checkpoint.md
    torchrun --standalone --nproc_per_node=2 scripts/bench_checkpoint.py --config configs/debug.toml

In one process group it builds the Trainer of the config (checkpointing on, in a fresh run folder
{run.dump_folder}/bench_checkpoint_<id>/, compile off unless --compile), then:
  steps 1-2   train (step 1 is the warm-up);
  (a) sync    CheckpointManager.save(2, blocking=True): wall time until it returns (max over ranks),
              the folder must be complete; rank 0 deletes it after a barrier;
  step 3      a step with no save in flight (the reference step time);
  (b) async   CheckpointManager.save(3, blocking=False): staging time (until control returns to
              training), then step 4 trains while the write is in flight, and up to --flight-steps
              more while it still is; the write's completion time is taken by a done-callback on
              its future (with checkpoint.async_writer = "process" the write itself runs in a
              writer process, and the callback fires when that process reports back);
  (c) resume  CheckpointManager.load() restores step-3 into the same Trainer objects, and step 4 is
              run again: its loss must equal the first step 4 bitwise with run.deterministic (else
              within a relative 1e-4, see NONDET_RTOL); grad norm, per-tensor weight checksums and
              the data-stream position after the step are compared too.
The step-3 folder is deleted unless --keep. Only one checkpoint exists at a time (a full Llama-3 8B
one, fp32 weights + AdamW moments, is ~96 GB), and the free space is checked before the first save.
--layer-fraction F builds only round(F x n_layers) layers of the flavor (for a slow or small disk);
--fit-seconds S first probes the disk (all ranks write and fsync --probe-gb GB each) and builds the
most layers whose checkpoint fits on it and whose two writes + one read take <= S at that speed. Either
way the table row says ONLY n of N layers.
Arguments the script does not know (--section.key=value) are config overrides.
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import sys
import threading
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

# Without run.deterministic the backward may reduce in another order (atomics in attention and
# embedding gradients, cuBLAS algorithm choice), but the loss of the resumed step is a forward of
# restored weights on the restored batch: a wrong restore moves it by far more than this.
NONDET_RTOL = 1e-4
GB = 1e9


def space_needed(ckpt_bytes: float) -> float:
    """Free bytes required before saving a checkpoint of ckpt_bytes: 5% + 1 GB for metadata, logs."""
    return 1.05 * ckpt_bytes + 1e9


def parse_args(argv: list[str]) -> tuple[argparse.Namespace, list[str]]:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0], allow_abbrev=False)
    p.add_argument("--config", required=True, help="the TOML config (e.g. configs/llama3_8b.toml)")
    p.add_argument("--keep", action="store_true", help="keep the run folder and the async checkpoint")
    p.add_argument("--compile", action="store_true", help="keep compile.enable as configured (default: off)")
    p.add_argument("--layer-fraction", type=float, default=1.0,
                   help="build and save only round(F x n_layers) layers of the flavor (0 < F <= 1)")
    p.add_argument("--fit-seconds", type=float, default=0.0,
                   help="probe the disk first and build only as many layers as fit on it and let two "
                        "checkpoint writes and one read take at most this long at the probed speed (0 = off)")
    p.add_argument("--probe-gb", type=float, default=4.0, help="GB each rank writes for the --fit-seconds probe")
    p.add_argument("--flight-steps", type=int, default=8,
                   help="after step 4, train at most this many more steps while the async write is in "
                        "flight, for the step time during a write (0 = step 4 only)")
    p.add_argument("--out", default="", help="also write the markdown report to this file (rank 0)")
    opts, rest = p.parse_known_args(argv)
    bad = [a for a in rest if not a.startswith("--")]
    if bad:
        raise ValueError(f"unexpected argument {bad[0]!r}: config overrides are --section.key=value")
    if not 0.0 < opts.layer_fraction <= 1.0:
        raise ValueError(f"--layer-fraction {opts.layer_fraction}: must be in (0, 1]")
    if opts.flight_steps < 0:
        raise ValueError("--flight-steps must be >= 0")
    if opts.fit_seconds < 0 or opts.probe_gb <= 0:
        raise ValueError("--fit-seconds must be >= 0 and --probe-gb > 0")
    if opts.fit_seconds > 0 and opts.layer_fraction < 1.0:
        raise ValueError("--fit-seconds and --layer-fraction both choose the depth; give one")
    return opts, rest


def build_config(opts: argparse.Namespace, overrides: list[str], world_size: int) -> tuple[Any, str]:
    """The job config with the benchmark's settings forced; returns (cfg, model label)."""
    from trainer.config import load_config, resolve_model_args, validate_config

    cfg = load_config(["--config", opts.config, *overrides])
    flavor_layers = resolve_model_args(cfg).n_layers
    label = f"{cfg.model.name} {cfg.model.flavor}"
    if opts.layer_fraction < 1.0:
        if "n_layers" in cfg.model.overrides:
            raise ValueError("--layer-fraction and model.overrides.n_layers both set the depth; give one")
        n = max(1, round(opts.layer_fraction * flavor_layers))
        cfg.model.overrides = {**cfg.model.overrides, "n_layers": n}
        label += f" (ONLY {n} of {flavor_layers} layers: --layer-fraction {opts.layer_fraction})"
    elif "n_layers" in cfg.model.overrides:
        label += f" ({cfg.model.overrides['n_layers']} layers)"
    run_id = os.environ.get("TORCHELASTIC_RUN_ID") or str(os.getpid())  # same on all ranks of a job
    cfg.run.name = f"bench_checkpoint_{run_id}"
    cfg.checkpoint.enable = True
    cfg.checkpoint.load_step = -1
    cfg.checkpoint.initial_load_path = ""
    cfg.compile.enable = bool(opts.compile and cfg.compile.enable)
    cfg.metrics.enable_wandb = False
    cfg.metrics.enable_tensorboard = False
    cfg.profiling.enable_profiling = False
    validate_config(cfg, world_size)
    return cfg, label


def checkpoint_bytes(cfg: Any, n_layers: int) -> int:
    """Expected checkpoint bytes with n_layers: fp32 weights + AdamW's two fp32 moments per parameter."""
    import dataclasses

    from trainer.config import resolve_model_args

    return 12 * dataclasses.replace(resolve_model_args(cfg), n_layers=n_layers).num_params()


def probe_disk(folder: Path, gb_per_rank: float) -> tuple[float, float]:
    """(aggregate write GB/s, free bytes) of `folder`: all ranks at once write and fsync gb_per_rank
    GB each, one file per rank as a DCP save does; the files are deleted before free space is read."""
    import numpy as np
    import torch
    import torch.distributed as dist

    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"probe_rank{dist.get_rank()}.bin"
    chunk = np.random.default_rng(dist.get_rank()).integers(0, 256, 64 << 20, dtype=np.uint8).tobytes()
    n_chunks = max(1, int(gb_per_rank * GB) // len(chunk))
    dist.barrier()
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        for _ in range(n_chunks):
            f.write(chunk)
        f.flush()
        os.fsync(f.fileno())
    elapsed = torch.tensor([time.perf_counter() - t0], dtype=torch.float64)
    path.unlink()
    dist.all_reduce(elapsed, op=dist.ReduceOp.MAX)
    dist.barrier()  # every probe file is gone
    free = torch.tensor([float(shutil.disk_usage(folder).free)], dtype=torch.float64)
    dist.all_reduce(free, op=dist.ReduceOp.MIN)  # one value on every rank: they must agree on a depth
    return dist.get_world_size() * n_chunks * len(chunk) / GB / elapsed.item(), free.item()


def ram_cap(folder: Path, nodes: int) -> float | None:
    """Largest checkpoint (bytes, all ranks) whose async save fits in host memory when `folder` is
    RAM-backed (tmpfs): staging and files both take RAM, with the trainer's headroom; else None."""
    from trainer.checkpoint_memory import (
        HEADROOM_BYTES,
        HEADROOM_FRACTION,
        RAM_FILESYSTEMS,
        filesystem_type,
        mem_available,
    )

    available = mem_available()
    if available is None or filesystem_type(folder) not in RAM_FILESYSTEMS:
        return None
    return max(0.0, nodes * (available - HEADROOM_BYTES) / (2 * (1 + HEADROOM_FRACTION)))


def fit_layers(cfg: Any, label: str, gbps: float, free: float, seconds: float,
               cap: float | None = None) -> tuple[str, str]:
    """Set model.overrides.n_layers to the most layers whose checkpoint fits in `free` bytes (and in
    `cap`, see ram_cap) and whose two writes + one read at `gbps` take <= seconds (at least 1 layer);
    returns (model label, a line saying what was chosen and why). ValueError when not even 1 layer
    fits."""
    from trainer.config import resolve_model_args

    full = resolve_model_args(cfg).n_layers
    size = {n: checkpoint_bytes(cfg, n) for n in range(1, full + 1)}
    io_s = {n: 3 * b / GB / gbps for n, b in size.items()}
    on_disk = [n for n in size if space_needed(size[n]) <= free and (cap is None or size[n] <= cap)]
    ram = "" if cap is None else f" (RAM-backed folder: async staging + files allow ~{_g(cap / GB)} GB)"
    if not on_disk:
        raise ValueError(f"{cfg.run.dump_folder}: {free / GB:.1f} GB free{ram}, not enough for a checkpoint "
                         f"of even 1 layer ({space_needed(size[1]) / GB:.1f} GB); use another --run.dump_folder")
    n = max([k for k in on_disk if io_s[k] <= seconds], default=1)
    line = (f"Disk probe: {_g(gbps)} GB/s written (fsynced) by all ranks, {_g(free / GB)} GB free{ram}; a "
            f"checkpoint of {full} layers (~{_g(size[full] / GB)} GB) written twice and read once would "
            f"take ~{_g(io_s[full])} s against --fit-seconds {seconds:g}"
            f"{'' if full in on_disk else ' and does not fit'}")
    if n == full:
        return label, line + ": the full depth is used."
    cfg.model.overrides = {**cfg.model.overrides, "n_layers": n}
    return (f"{cfg.model.name} {cfg.model.flavor} (ONLY {n} of {full} layers: --fit-seconds {seconds:g})",
            line + f", so ONLY {n} of {full} layers are built and saved (~{_g(size[n] / GB)} GB, "
            f"~{_g(io_s[n])} s of I/O).")


class Bench:
    """Runs (a), (b), (c) on a built Trainer; per-rank numbers are reduced (max) at the end."""

    def __init__(self, trainer: Any) -> None:
        import torch

        self.t = trainer
        self.mgr = trainer.checkpointer
        self.cuda = trainer.device.type == "cuda"
        self.torch = torch
        self.step_s: dict[str, float] = {}
        self.losses: dict[str, float] = {}

    # ---- helpers -------------------------------------------------------------------------------
    def sync(self) -> None:
        if self.cuda:
            self.torch.cuda.synchronize(self.t.device)

    def step(self, name: str) -> float:
        """Train one step; returns its wall time (the loss goes into self.losses)."""
        self.sync()
        t0 = time.perf_counter()
        loss = self.t.train_step()
        self.sync()
        self.step_s[name] = time.perf_counter() - t0
        self.losses[name] = loss
        return self.step_s[name]

    def any_rank(self, flag: bool) -> bool:
        return self.max_over_ranks([float(flag)])[0] > 0

    def on_rank0(self, fn: Callable[[], Any]) -> Any:
        """fn on rank 0 after a barrier, its result (or its error) on every rank."""
        import torch.distributed as dist

        dist.barrier()
        box: list[Any] = [None]
        if self.t.rank == 0:
            try:
                box[0] = ("ok", fn())
            except Exception as exc:
                box[0] = ("error", f"{type(exc).__name__}: {exc}")
        dist.broadcast_object_list(box, src=0)
        if box[0][0] == "error":
            raise RuntimeError(box[0][1])
        return box[0][1]

    def max_over_ranks(self, values: list[float]) -> list[float]:
        import torch.distributed as dist

        v = self.torch.tensor(values, dtype=self.torch.float64)  # CPU: the gloo side of the group
        dist.all_reduce(v, op=dist.ReduceOp.MAX)
        return v.tolist()

    def expected_bytes(self) -> int:
        """Bytes of this state's tensors over all ranks (each shard once): the size to expect."""
        import torch.distributed as dist
        from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict
        from torch.distributed.tensor import DTensor

        total = 0
        sds = [get_model_state_dict(self.t.model), get_optimizer_state_dict(self.t.model, self.t.optimizer)]
        stack: list[Any] = list(sds)
        while stack:
            x = stack.pop()
            if isinstance(x, dict):
                stack.extend(x.values())
            elif isinstance(x, (list, tuple)):
                stack.extend(x)
            elif isinstance(x, self.torch.Tensor):
                local = x.to_local() if isinstance(x, DTensor) else x
                total += local.numel() * local.element_size()
        n = self.torch.tensor([total], dtype=self.torch.float64)
        dist.all_reduce(n)
        return int(n.item())

    def checksums(self) -> list[tuple[float, float]]:
        """(sum, sum of squares) in float64 of this rank's shard of every parameter."""
        from torch.distributed.tensor import DTensor

        out = []
        with self.torch.no_grad():
            for p in self.t.model.parameters():
                local = (p.to_local() if isinstance(p, DTensor) else p).double()
                out.append(self.torch.stack([local.sum(), local.square().sum()]))
        return [tuple(x) for x in self.torch.stack(out).cpu().tolist()]

    # ---- the measurement -----------------------------------------------------------------------
    def run(self, keep: bool, flight_steps: int = 0) -> dict[str, Any]:
        from trainer.checkpoint_folders import incomplete_reason, step_folder

        t, mgr = self.t, self.mgr
        if t.step != 0:
            raise RuntimeError(f"the benchmark must start at step 0, but the Trainer resumed at {t.step}")
        res: dict[str, Any] = {}
        self.step("1")
        self.step("2")

        need = self.expected_bytes()
        res["expected_gb"] = need / GB

        def check_space() -> float:
            mgr.root.mkdir(parents=True, exist_ok=True)
            free = shutil.disk_usage(mgr.root).free
            if free < space_needed(need):
                raise ValueError(
                    f"{mgr.root}: {free / GB:.1f} GB free, a checkpoint of this state needs about "
                    f"{space_needed(need) / GB:.1f} GB; pass --run.dump_folder=<a bigger disk>, "
                    "--layer-fraction or --fit-seconds")
            return free

        res["free_gb"] = self.on_rank0(check_space) / GB

        def verify(path: Path) -> int:
            reason = incomplete_reason(path)
            if reason is not None:
                raise RuntimeError(f"checkpoint {path} is not complete after its save: {reason}")
            return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())

        # (a) blocking save through the manager's own path (plan exchange, write, metadata, check).
        self.on_rank0(lambda: None)
        t0 = time.perf_counter()
        mgr.save(t.step, blocking=True)
        sync_s = time.perf_counter() - t0
        path_a = step_folder(mgr.root, t.step)
        res["sync_bytes"] = self.on_rank0(lambda: verify(path_a))
        self.on_rank0(lambda: shutil.rmtree(path_a))

        self.step("3")  # no save in flight: the reference step time

        # (b) async save: staging blocks, the write runs on the manager's gloo group in a thread.
        self.on_rank0(lambda: None)
        t0 = time.perf_counter()
        mgr.save(t.step, blocking=False)
        staged_s = time.perf_counter() - t0
        pending = mgr._pending  # private: the future of the write in flight
        if pending is None:
            raise RuntimeError("CheckpointManager.save(blocking=False) started no async save: the "
                               "node lacks the host memory for it (see the warning above); use a "
                               "checkpoint folder on disk or --layer-fraction / --fit-seconds")
        # concurrent.futures runs callbacks after waking result(): an Event orders the two.
        done_at: list[float] = []
        written = threading.Event()

        def on_done(_future: Any) -> None:
            done_at.append(time.perf_counter())
            written.set()

        pending.future.add_done_callback(on_done)
        path_b = pending.path
        self.step("4")
        loss4 = self.losses["4"]
        res["in_flight_after_step"] = not pending.future.done()
        after = {"grad_norm": t.last_grad_norm, "sums": self.checksums(),
                 "stream": t.stream.state_dict(), "tokens_seen": t.tokens_seen}
        # More steps while the write lasts: a step that starts with the write in flight counts (the
        # check is per rank, so ranks may run different numbers; each step is a collective, so all
        # ranks decide together: the write counts as in flight while any rank's is).
        for k in range(flight_steps):
            if not self.any_rank(not pending.future.done()):
                break
            self.step(f"{5 + k} (write in flight)")
        t_wait = time.perf_counter()
        mgr._wait()  # private: blocks until the write is complete (the next save would do the same)
        wait_s = time.perf_counter() - t_wait
        if not written.wait(timeout=60):
            raise RuntimeError("the async save's future completed but its done-callback never ran")
        total_s = done_at[0] - t0
        res["async_bytes"] = self.on_rank0(lambda: verify(path_b))

        # (c) resume: the public start path picks the newest complete folder, i.e. path_b.
        self.on_rank0(lambda: None)
        t0 = time.perf_counter()
        mgr.load()
        load_s = time.perf_counter() - t0
        if t.step != 3:
            raise RuntimeError(f"load() restored step {t.step}, expected 3 from {path_b}")
        self.step("4 again (resumed)")
        loss4b = self.losses["4 again (resumed)"]
        again = {"grad_norm": t.last_grad_norm, "sums": self.checksums(),
                 "stream": t.stream.state_dict(), "tokens_seen": t.tokens_seen}
        if not keep:
            self.on_rank0(lambda: shutil.rmtree(path_b))

        # Resume verdict: every rank compares its own shards; any mismatch anywhere counts.
        sums_rel = max((abs(a - b) / max(abs(a), 1e-30) for x, y in zip(after["sums"], again["sums"])
                        for a, b in zip(x, y)), default=0.0)
        grad_rel = abs(after["grad_norm"] - again["grad_norm"]) / max(abs(after["grad_norm"]), 1e-30)
        same_stream = float(after["stream"] != again["stream"] or after["tokens_seen"] != again["tokens_seen"])
        names = list(self.step_s)
        maxed = self.max_over_ranks([sync_s, staged_s, total_s, wait_s, load_s, sums_rel, grad_rel,
                                     same_stream, *[self.step_s[n] for n in names]])
        (res["sync_s"], res["staged_s"], res["total_s"], res["wait_s"], res["load_s"], res["sums_rel"],
         res["grad_rel"], stream_differs) = maxed[:8]
        res["step_s"] = dict(zip(names, maxed[8:]))
        # Step 4 starts right after staging, with the write in flight by construction.
        in_flight = [v for n, v in res["step_s"].items() if n == "4" or n.endswith("(write in flight)")]
        res["flight_mean_s"] = sum(in_flight) / len(in_flight) if in_flight else float("nan")
        res["flight_n"] = len(in_flight)
        res["stream_ok"] = stream_differs == 0.0
        res["loss4"], res["loss4b"] = loss4, loss4b
        res["path"] = str(path_b) if keep else ""
        return res


def verdict(res: dict[str, Any], deterministic: bool) -> tuple[bool, str, list[str]]:
    """(passed, table cell, detail lines) of the resume check."""
    a, b = res["loss4"], res["loss4b"]
    diff = abs(a - b)
    lines = [f"Resume: loss of step 4 continuing {a!r}, after loading step-3 {b!r} (|diff| {diff:.3e}); "
             f"grad norm max rel diff {res['grad_rel']:.3e}; weight checksums after the step max rel "
             f"diff {res['sums_rel']:.3e}; data stream position {'equal' if res['stream_ok'] else 'DIFFERS'}."]
    if deterministic:
        ok = a == b and res["grad_rel"] == 0.0 and res["sums_rel"] == 0.0 and res["stream_ok"]
        cell = "bitwise" if ok else f"NO (loss diff {diff:.3e})"
        lines.append("Criterion (run.deterministic = true): loss, grad norm, weights and stream bitwise equal.")
    else:
        ok = diff <= NONDET_RTOL * abs(a) and res["stream_ok"]
        cell = ("bitwise" if diff == 0 else f"rel {diff / abs(a):.1e}") if ok else f"NO (loss diff {diff:.3e})"
        lines.append(f"Criterion (run.deterministic = false): |loss diff| <= {NONDET_RTOL:g} x |loss| and "
                     "the same stream position; the backward may reduce in another order, so grad norm "
                     "and weights are reported, not required equal; --run.deterministic requires all four bitwise.")
    return ok, cell, lines


def report(res: dict[str, Any], cfg: Any, label: str, world: int, trainer: Any) -> tuple[bool, str]:
    ok, cell, detail = verdict(res, cfg.run.deterministic)
    size = res["async_bytes"] / GB
    s = res["step_s"]
    head = ("| model | ranks | checkpoint GB | sync save s | sync GB/s | async staging s | async total s "
            "| async GB/s | step s | step s, write in flight | resume load s | resume loss match |")
    row = (f"| {label} | {world} | {_g(size)} | {_g(res['sync_s'])} | {_g(res['sync_bytes'] / GB / res['sync_s'])} "
           f"| {_g(res['staged_s'])} | {_g(res['total_s'])} | {_g(size / res['total_s'])} | {_g(s['3'])} "
           f"| {_g(res['flight_mean_s'])} (mean of {res['flight_n']}) | {_g(res['load_s'])} | {cell} |")
    flight = ("still in flight when the step ended" if res["in_flight_after_step"]
              else "finished before the step ended")
    notes = [
        f"Checkpoint: step-2 (sync) {_g(res['sync_bytes'] / GB)} GB and step-3 (async) {_g(size)} GB on disk "
        f"(GB = 1e9 bytes); the state's tensors hold {_g(res['expected_gb'])} GB.",
        "Times: max over ranks. Sync save = CheckpointManager.save(blocking=True) until it returns (files "
        "fsynced, metadata written, CRC32 checksums recorded, folder checked). Async staging = save(blocking=False) "
        "until it returns; async total = until the write's future, which includes the checksums, completed "
        "(a done-callback on its future).",
        f"Overlap: step 4 ran while the async write was in flight; the write was {flight}; "
        f"{res['flight_n'] - 1} more step(s) started while it was (--flight-steps); the wait for it "
        f"afterwards took {res['wait_s']:.2f} s. Step s = step 3 (no write); write in flight = the mean "
        "of step 4 and those steps.",
        "Step times (s, max over ranks): " + ", ".join(f"step {k} {v:.3f}" for k, v in s.items()) + ".",
        "Resume load s: CheckpointManager.load() of the folder just written, its checksums verified first; the "
        "page cache may serve it.",
        *detail,
    ]
    if res["fit_line"]:
        notes.append(res["fit_line"])
    if "ONLY" in label:
        notes.append(f"NOTE: {label}: size and times are those of the truncated model, not the full one.")
    if res["path"]:
        notes.append(f"Kept: {res['path']}")
    text = "\n".join([head, "|" + "---|" * 12, row, "", *notes, "", "Environment:", *environment(cfg, trainer, res)])
    return ok, text


def _g(x: float) -> str:
    """Three significant digits: a 96 GB and a 0.5 MB checkpoint both stay readable."""
    return f"{x:.3g}" if abs(x) < 1000 else f"{x:,.0f}"


def _mount_of(path: Path) -> str:
    """'mount point (fs type, device)' holding path; 'unknown' off Linux."""
    from trainer.checkpoint_memory import mount_of

    mount = mount_of(path)
    return "unknown" if mount is None else f"{mount[0]} ({mount[1]}, {mount[2]})"


def dist_world() -> int:
    import torch.distributed as dist

    return dist.get_world_size() if dist.is_initialized() else 1


def environment(cfg: Any, trainer: Any, res: dict[str, Any]) -> list[str]:
    import torch

    if torch.cuda.is_available():
        dev = f"{torch.cuda.device_count()} x {torch.cuda.get_device_name(0)}, CUDA {torch.version.cuda}"
    else:
        dev = "CPU (gloo)"
    t = cfg.training
    return [
        f"- command (argv of each of the {dist_world()} ranks): {' '.join(sys.argv)}",
        f"- torch {torch.__version__}, Python {platform.python_version()}, {platform.platform()}",
        f"- device: {dev}; parallel dims: {trainer.dims}",
        f"- model: {trainer.n_params:,} params; seq_len {t.seq_len}, local batch {t.local_batch_size}, "
        f"AC {cfg.activation_checkpoint.mode}, compile {'on' if cfg.compile.enable else 'off'}, "
        f"deterministic {cfg.run.deterministic}",
        f"- checkpoint folder: {trainer.checkpointer.root} on {_mount_of(trainer.checkpointer.root.parent)}, "
        f"{res['free_gb']:.1f} GB free before the first save; DCP FileSystemWriter, async on a gloo group, "
        f"written by a {trainer.checkpointer.writer} (checkpoint.async_writer = "
        f"{cfg.checkpoint.async_writer!r})",
    ]


def main(argv: list[str] | None = None) -> int:
    from trainer.config import ConfigError
    from trainer.parallel.dims import env_world_size

    argv = sys.argv[1:] if argv is None else argv
    world = env_world_size()
    try:
        opts, overrides = parse_args(argv)
        cfg, label = build_config(opts, overrides, world)
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from trainer.config import validate_config
    from trainer.distributed import destroy_distributed, init_distributed
    from trainer.trainer import Trainer

    from trainer.train import report_stop

    fit_line = ""
    try:
        if opts.fit_seconds > 0:
            # The probe needs the process group (all ranks write at once, then agree on one depth); the
            # Trainer reuses the group started here.
            run_dir = Path(cfg.run.dump_folder).expanduser() / cfg.run.name
            init_distributed(cfg.comm, str(run_dir))
            gbps, free = probe_disk(run_dir, opts.probe_gb)
            nodes = max(1, world // int(os.environ.get("LOCAL_WORLD_SIZE", str(world))))
            label, fit_line = fit_layers(cfg, label, gbps, free, opts.fit_seconds, ram_cap(run_dir, nodes))
            validate_config(cfg, world)
        trainer = Trainer(cfg)
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        # The start-up refusals of train.py (an unwritable run folder, a GPU backend on CPU): one
        # `[rankN] error:` line per rank, as the README promises, not a traceback per rank.
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        destroy_distributed()
        return report_stop(exc, 2, "start-up")
    ok, text = False, ""
    try:
        res = Bench(trainer).run(opts.keep, opts.flight_steps)
        res["fit_line"] = fit_line
        ok, text = report(res, cfg, label, world, trainer)
    finally:
        trainer.close()
        if trainer.rank == 0 and not opts.keep:
            shutil.rmtree(trainer.run_dir, ignore_errors=True)
        destroy_distributed()
    if trainer.rank == 0:
        print(text, flush=True)
        if opts.out:
            Path(opts.out).parent.mkdir(parents=True, exist_ok=True)
            Path(opts.out).write_text(f"# Checkpoint benchmark\n\n{text}\n")
        print("resume check: " + ("PASSED" if ok else "FAILED"), flush=True)
    return 0 if ok else 1


if __name__ == "__main__":
    from trainer.train import run_and_leave

    run_and_leave(main)  # as train.py: without the interpreter's teardown, where gloo can abort a rank
