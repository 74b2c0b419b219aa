"""Training metrics: peak FLOP/s per device, tokens/s/GPU, TFLOP/s, MFU, memory; and the logger.

Conventions (torchtitan-compatible on purpose, DESIGN.md section 4):
  tokens/s/GPU = local tokens / (elapsed x cp x tp)   (a rank's tokens counted once per cp x tp group)
  TFLOP/s      = flops_per_token x tokens/s/GPU / 1e12
  MFU (%)      = 100 x flops_per_token x tokens/s/GPU / peak
FLOPs/token comes from the model args (6 x non-embedding params + 12 x layers x dim x seq_len).

Typical use in the trainer:
    meter = StepMeter(flops_per_token, resolve_peak_flops(cfg.metrics, device, rank), cp=cp, tp=tp, device=device)
    logger = MetricsLogger(cfg, run_dir, rank)
    ... after a checkpoint load that restored step N > 0: logger.resumed_at(N)
    ... each step: meter.add_step(local_tokens, data_seconds)
    ... at log steps: logger.log(step, {**meter.collect(), "loss_metrics/global_avg_loss": loss, ...})
"""

from __future__ import annotations

import contextlib
import dataclasses
import math
import re
import time
from pathlib import Path
from typing import Any, Callable, Iterator

import torch

from trainer.gpu_monitor import CLOCK_KEY, POWER_KEY, GpuSampler
from trainer.log import logger
from trainer.metric_sinks import (
    JsonlSink,
    TensorBoardSink,
    WandbSink,
    require_tensorboard,
    wandb_init_timeout_from_env,
)

# Every log step writes all of these (JSONL and wandb alike), plus "step".
METRIC_KEYS = (
    "loss_metrics/global_avg_loss",
    "grad_norm",
    "lr",
    "throughput(tps)",
    "tflops",
    "mfu(%)",
    "memory/max_active(GiB)",
    "memory/max_reserved(GiB)",
    "memory/num_alloc_retries",
    "time_metrics/end_to_end(s)",
    "time_metrics/data_loading(%)",
    "n_tokens_seen",
)
# Keys whose value may be None: MFU is unknown without a peak, memory off CUDA (no allocator peaks).
NULLABLE_KEYS = frozenset({"mfu(%)", "memory/max_active(GiB)", "memory/max_reserved(GiB)"})

GIB = 1024**3

# ---------------------------------------------------------------- peak FLOP/s

# Dense bf16 tensor-core peaks from NVIDIA's datasheets (the sparse figures are twice these).
# Order matters: the first pattern that matches torch.cuda.get_device_name() wins, so the NVL and
# PCIe parts (lower clocks and power) come before their SXM siblings, and GB200/GH200 are told
# apart from B200/H200 by the word boundary.
_PEAKS: tuple[tuple[str, str, float], ...] = (
    (r"\bGB200\b", "GB200", 2.5e15),
    (r"\bB200\b", "B200", 2.25e15),
    (r"\bGH200\b", "GH200 (H100 SXM class)", 989e12),
    (r"\bH200\b.*\bNVL\b", "H200 NVL", 835e12),
    (r"\bH200\b", "H200 SXM", 989e12),
    (r"\bH100\b.*\bNVL\b", "H100 NVL", 835e12),
    (r"\bH100\b.*\bPCIE\b", "H100 PCIe", 756e12),
    # 'NVIDIA H100 80GB HBM3' is the SXM5 part; a bare 'H100' is ambiguous and stays unknown.
    (r"\bH100\b.*\b(HBM3|SXM\d?)\b", "H100 SXM", 989e12),
    # Every A100 (SXM4 and PCIe, 40 and 80 GB) has the same 312 TFLOP/s bf16 dense peak.
    (r"\bA100\b", "A100", 312e12),
)


def peak_flops(device_name: str, *, warn: bool = True) -> float | None:
    """Dense bf16 peak FLOP/s of one device, from its torch.cuda.get_device_name() string.

    Unknown devices (CPU, AMD, a bare 'H100', a MIG slice) get None and exactly one warning: never
    another GPU's peak, which would print a wrong MFU (torchtitan falls back to the A100 peak and
    reports >100% on B200). Set metrics.peak_tflops to give the peak yourself. `warn=False` (ranks
    other than 0, which see the same devices) keeps a 64-rank job at one warning.
    """
    name = device_name.upper()
    if "MIG" in name.split():
        if warn:
            logger.warning(
                f"MFU: '{device_name}' is a MIG slice with a fraction of the GPU's peak; no MFU is reported. "
                "Set metrics.peak_tflops (TFLOP/s of the slice) to get one"
            )
        return None
    for pattern, _label, peak in _PEAKS:
        if re.search(pattern, name):
            return peak
    if warn:
        logger.warning(
            f"MFU: no bf16 peak known for device '{device_name}'; MFU is not reported. "
            "Set metrics.peak_tflops (dense bf16 TFLOP/s of one device) to report it"
        )
    return None


def device_name(device: torch.device | str) -> str:
    """The name the peak table is keyed by: torch.cuda.get_device_name for CUDA, else the type."""
    device = torch.device(device)
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return device.type


def resolve_peak_flops(metrics_cfg: Any, device: torch.device | str, rank: int = 0) -> float | None:
    """Peak FLOP/s for MFU: metrics.peak_tflops when set (> 0), else the table (None if unknown).

    Only rank 0 warns about an unknown device.
    """
    override = float(metrics_cfg.peak_tflops)
    if not math.isfinite(override) or override < 0:
        raise ValueError(
            f"[metrics] peak_tflops = {metrics_cfg.peak_tflops!r}: expected 0 (look the device up) or the "
            "positive dense bf16 TFLOP/s of one device, e.g. 989 for an H200"
        )
    if override > 0:
        return override * 1e12
    return peak_flops(device_name(device), warn=rank == 0)


# ---------------------------------------------------------------- throughput


def throughput(
    tokens: float, elapsed_s: float, cp: int, tp: int, flops_per_token: float, peak: float | None
) -> tuple[float, float, float | None]:
    """(tokens/s/GPU, TFLOP/s per GPU, MFU in % or None) for `tokens` local tokens in `elapsed_s`.

    `tokens` are those this rank processed (its local batch x seq_len per step, all CP shards of it
    counted once); dividing by cp x tp spreads them over the GPUs of its cp x tp group.
    """
    if elapsed_s <= 0:
        raise ValueError(f"elapsed time must be > 0 s, got {elapsed_s}")
    if cp < 1 or tp < 1:
        raise ValueError(f"cp and tp degrees must be >= 1, got cp={cp}, tp={tp}")
    tps = tokens / (elapsed_s * cp * tp)
    flops = flops_per_token * tps
    mfu = None if peak is None else 100.0 * flops / peak
    return tps, flops / 1e12, mfu


class StepMeter:
    """Accumulates steps between log steps and turns them into throughput, MFU, memory and time.

    Memory is the caching allocator's peak active and peak reserved bytes in GiB (memory_stats'
    active_bytes.all.peak and reserved_bytes.all.peak, the figures torchtitan logs under the same
    names), reset at every collect() so each log step shows the peak of its own period. Active
    counts freed blocks still in use by another stream (FSDP's gathers), which
    max_memory_allocated does not. Off CUDA both are None (process RSS is not comparable to a GPU
    allocator's numbers, so it is not used; a 0.0 read as "nothing allocated").
    num_alloc_retries counts, per period, the times the CUDA caching allocator ran out, freed its
    cache and retried: each retry synchronises the device, so a run near the memory limit slows down
    with no other sign in the memory figures. With a `gpu` sampler, the period's mean SM clock and
    power draw are added (trainer/gpu_monitor.py).
    """

    def __init__(
        self,
        flops_per_token: float,
        peak: float | None,
        *,
        cp: int = 1,
        tp: int = 1,
        device: torch.device | str = "cpu",
        clock: Callable[[], float] = time.perf_counter,
        gpu: GpuSampler | None = None,
    ) -> None:
        if cp < 1 or tp < 1:
            raise ValueError(f"cp and tp degrees must be >= 1, got cp={cp}, tp={tp}")
        self.flops_per_token = float(flops_per_token)
        self.peak = peak
        self.cp, self.tp = cp, tp
        self.device = torch.device(device)
        self._clock = clock
        self._gpu = gpu
        self._retries_seen = self._memory_gib()[2]
        self.reset()

    def _memory_gib(self) -> tuple[float | None, float | None, int]:
        """(peak active GiB, peak reserved GiB, cumulative alloc retries) of this period."""
        if self.device.type != "cuda":
            return None, None, 0
        stats = torch.cuda.memory_stats(self.device)
        return (stats.get("active_bytes.all.peak", 0) / GIB, stats.get("reserved_bytes.all.peak", 0) / GIB,
                int(stats.get("num_alloc_retries", 0)))

    def reset(self) -> None:
        """Start a new period now (call once right before the training loop)."""
        self._start = self._clock()
        self._tokens = 0
        self._steps = 0
        self._data_s = 0.0
        if self._gpu is not None:
            self._gpu.take()  # drop the readings from before this period
        if self.device.type == "cuda":
            torch.cuda.reset_peak_memory_stats(self.device)

    def add_step(self, tokens: int, data_seconds: float = 0.0) -> None:
        """Record one optimizer step: `tokens` processed by this rank, `data_seconds` spent loading."""
        self._tokens += int(tokens)
        self._steps += 1
        self._data_s += float(data_seconds)

    @contextlib.contextmanager
    def paused(self, when: bool = True) -> Iterator[None]:
        """With `when`, time spent inside is not step time: a checkpoint save or a profiler trace
        export between two log steps would lower the next row's tokens/s and MFU by its length
        (Megatron stops its interval timer around a save likewise; the save logs its own duration).

        Synchronises the CUDA device first, so the kernels of the steps before stay counted; hence
        `when`: pass False for the steps where nothing is saved or written, which need no sync.
        """
        if not when:
            yield
            return
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        t0 = self._clock()
        try:
            yield
        finally:
            self._start += self._clock() - t0

    def collect(self) -> dict[str, float | None]:
        """The period's metrics under METRIC_KEYS names; starts the next period.

        Synchronises the CUDA device first, so the wall time covers the queued kernels.
        """
        if self._steps == 0:
            raise ValueError("StepMeter.collect() called before any add_step() in this period")
        if self.device.type == "cuda":
            torch.cuda.synchronize(self.device)
        elapsed = self._clock() - self._start
        tps, tflops, mfu = throughput(self._tokens, elapsed, self.cp, self.tp, self.flops_per_token, self.peak)
        active, reserved, retries = self._memory_gib()
        # max: torch.cuda.reset_accumulated_memory_stats() elsewhere restarts the counter at 0.
        new_retries, self._retries_seen = max(retries - self._retries_seen, 0), retries
        out = {
            "throughput(tps)": tps,
            "tflops": tflops,
            "mfu(%)": mfu,
            "memory/max_active(GiB)": active,
            "memory/max_reserved(GiB)": reserved,
            "memory/num_alloc_retries": new_retries,
            "time_metrics/end_to_end(s)": elapsed / self._steps,
            "time_metrics/data_loading(%)": 100.0 * self._data_s / elapsed,
        }
        if self._gpu is not None:
            out.update(self._gpu.take())
        self.reset()
        return out


# ---------------------------------------------------------------- logger


class MetricsLogger:
    """Rank 0 writes each log step to the console, run_dir/metrics.jsonl, wandb and TensorBoard.

    Other ranks get a logger whose methods do nothing. No method does a collective, so no rank can
    wait on another here; the trainer places the barrier after construction.

    `config` is the resolved config as a nested dict for the wandb run (default: the JobConfig as
    dataclasses.asdict gives it). `wandb_init_timeout` defaults to $WANDB_INIT_TIMEOUT or 90 s.
    """

    def __init__(
        self,
        job_config: Any,
        run_dir: Path,
        rank: int,
        *,
        config: dict[str, Any] | None = None,
        wandb_init_timeout: float | None = None,
    ) -> None:
        m = job_config.metrics
        self.run_dir = Path(run_dir)
        self.rank = rank
        self._sinks: list[Any] = []
        self._closed = False
        self._replays_after: int | None = None  # resumed_at's step, applied at the next log()
        if m.enable_tensorboard:
            require_tensorboard()  # on every rank, so all ranks fail together with the same message
        if rank != 0:
            return
        self.run_dir.mkdir(parents=True, exist_ok=True)
        self._sinks.append(JsonlSink(self.run_dir / "metrics.jsonl"))
        if m.enable_tensorboard:
            self._sinks.append(TensorBoardSink(self.run_dir / "tb"))
        if m.enable_wandb:
            timeout = wandb_init_timeout_from_env() if wandb_init_timeout is None else float(wandb_init_timeout)
            if not timeout > 0:
                raise ValueError(f"MetricsLogger: wandb_init_timeout must be > 0 seconds, got {wandb_init_timeout!r}")
            sink = WandbSink(
                project=m.wandb_project,
                name=job_config.run.name,
                run_dir=self.run_dir,
                config=dataclasses.asdict(job_config) if config is None else config,
                init_timeout=timeout,
            )
            if sink.active:
                self._sinks.append(sink)

    @property
    def wandb_active(self) -> bool:
        return any(isinstance(s, WandbSink) and s.active for s in self._sinks)

    def log(self, step: int, values: dict[str, Any]) -> None:
        """Write one log step. `values` must hold every METRIC_KEYS key (those of NULLABLE_KEYS may be None);
        extra keys (e.g. MoE router stats) are written too. 0-d tensors are read with .item()."""
        if self.rank != 0:
            return
        if self._closed:
            raise ValueError("MetricsLogger.log() after close()")
        row = {k: _to_python(k, v) for k, v in values.items() if k != "step"}
        missing = [k for k in METRIC_KEYS if k not in row]
        if missing:
            raise ValueError(f"MetricsLogger.log(step={step}): missing metric keys {missing}")
        nulls = [k for k in METRIC_KEYS if row[k] is None and k not in NULLABLE_KEYS]
        if nulls:
            raise ValueError(f"MetricsLogger.log(step={step}): metric keys {nulls} are None")
        logger.info(format_console_line(step, row))
        if self._replays_after is not None:
            for sink in self._sinks:
                sink.resumed_at(self._replays_after)
            self._replays_after = None
        for sink in self._sinks:
            sink.write(step, row)

    def resumed_at(self, step: int) -> None:
        """Tell the sinks that training continues after `step`, restored from a checkpoint.

        The Trainer calls it once per launch, right after the checkpoint load and before the first
        log(), with the step it continues after: the loaded one, or 0 when it starts over (no
        checkpoint, a weights-only load), which moves every earlier row that has a step.
        Steps after `step` that earlier attempts logged are about to be logged again, so, at this
        launch's first log() (a launch stopped before its first step replaces nothing): metrics.jsonl
        moves their rows to metrics.superseded.jsonl (each step stays once in metrics.jsonl,
        nothing is deleted), TensorBoard hides their events (purge_step), and wandb, which cannot
        rewind, skips this attempt's steps up to its last one (one warning).
        Rank 0 only (no collective); with nothing after `step`, no file is touched.
        """
        if isinstance(step, bool) or not isinstance(step, int) or step < 0:
            raise ValueError(f"MetricsLogger.resumed_at(step={step!r}): expected the resumed step, an int >= 0")
        if self.rank != 0:
            return
        if self._closed:
            raise ValueError("MetricsLogger.resumed_at() after close()")
        self._replays_after = step

    def close(self) -> None:
        if self._closed:
            return
        self._closed = True
        for sink in self._sinks:
            sink.close()

    def __enter__(self) -> "MetricsLogger":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _to_python(key: str, v: Any) -> Any:
    if isinstance(v, torch.Tensor):
        if v.numel() != 1:
            raise ValueError(f"metric '{key}': expected a number or a 1-element tensor, got shape {tuple(v.shape)}")
        return v.item()
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if hasattr(v, "item"):  # numpy scalars
        return v.item()
    raise ValueError(f"metric '{key}': expected a number, got {type(v).__name__}")


def format_console_line(step: int, row: dict[str, Any]) -> str:
    """One compact line: step, loss, grad_norm, lr, tps, tflops, mfu, memory."""
    mfu = row["mfu(%)"]
    return (
        f"step {step:>6}  loss {row['loss_metrics/global_avg_loss']:8.4f}  "
        f"grad_norm {row['grad_norm']:7.4f}  lr {row['lr']:.3e}  "
        f"tps {row['throughput(tps)']:,.0f}  tflops {row['tflops']:.2f}  "
        f"mfu {'n/a' if mfu is None else f'{mfu:.2f}%'}"
        + ("" if row["memory/max_active(GiB)"] is None else
           f"  memory {row['memory/max_active(GiB)']:.2f}GiB ({row['memory/max_reserved(GiB)']:.2f} reserved)")
        + (f"  gpu {row[CLOCK_KEY]:,.0f} MHz {row[POWER_KEY]:.0f} W" if CLOCK_KEY in row else "")
        + (f"  alloc retries {row['memory/num_alloc_retries']} (near the memory limit: each one "
           "synchronises the GPU)" if row.get("memory/num_alloc_retries") else "")
    )
