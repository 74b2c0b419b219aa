"""The GPU's SM clock and power draw, sampled beside training, as means per log period.

An H200 runs its FP8 GEMMs at the 700 W power limit (docs/benchmarks.md 5b), and throughput differs
by a few % between machine starts (2e); with the clock and power in the log, a slow run can be told
apart from a throttled one (2f: the slower of two starts ran at a 3-4% lower clock at the same draw).
A daemon thread reads NVML (through torch.cuda.clock_rate/power_draw, which map the CUDA device to
NVML's numbering) every `interval_s`. It never touches a CUDA stream, so it adds no GPU work or
synchronisation to the step, only a few host calls per interval. Without NVML (CPU, or no
nvidia-ml-py) there is no sampler and the metrics are simply absent.
"""

from __future__ import annotations

import threading
from typing import Callable

import torch

from trainer.log import logger

CLOCK_KEY = "gpu/sm_clock(MHz)"
POWER_KEY = "gpu/power(W)"

Reading = tuple[float, float]  # (SM clock MHz, power W)


def nvml_reader(device: torch.device) -> Callable[[], Reading]:
    """A function reading (SM clock MHz, power W) of `device`; raises if NVML cannot read it."""
    index = device.index if device.index is not None else torch.cuda.current_device()

    def read() -> Reading:
        return float(torch.cuda.clock_rate(index)), torch.cuda.power_draw(index) / 1000.0  # mW -> W

    read()  # fail here, in the caller, rather than silently in the thread
    return read


class GpuSampler:
    """Samples `read()` every `interval_s` seconds in a daemon thread; take() gives the means of
    the samples since the previous take() under CLOCK_KEY and POWER_KEY. A period shorter than the
    interval repeats the previous period's means; before the first sample, take() is empty."""

    def __init__(self, read: Callable[[], Reading], interval_s: float = 0.2) -> None:
        if not interval_s > 0:
            raise ValueError(f"GpuSampler: interval_s must be > 0, got {interval_s!r}")
        self._read = read
        self._interval = float(interval_s)
        self._lock = threading.Lock()
        self._sums = [0.0, 0.0]
        self._count = 0
        self._last: dict[str, float] = {}
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="titankit-gpu-sampler", daemon=True)
        self._thread.start()

    @classmethod
    def for_device(cls, device: torch.device, interval_s: float = 0.2) -> "GpuSampler | None":
        """A sampler of a CUDA device, or None (with one log line saying why) where NVML is missing."""
        if device.type != "cuda":
            return None
        try:
            read = nvml_reader(device)
        except Exception as e:  # ModuleNotFoundError without nvidia-ml-py, NVMLError from the driver
            logger.info(f"GPU clock and power are not logged: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
            return None
        return cls(read, interval_s)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                clock, power = self._read()
            except Exception as e:  # a driver hiccup must not kill training: stop sampling, say so
                logger.warning(f"GPU sampler stopped: {type(e).__name__}: {str(e).splitlines()[0][:160]}")
                return
            with self._lock:
                self._sums[0] += clock
                self._sums[1] += power
                self._count += 1

    def take(self) -> dict[str, float]:
        with self._lock:
            sums, n = self._sums, self._count
            self._sums, self._count = [0.0, 0.0], 0
            if n:
                self._last = {CLOCK_KEY: sums[0] / n, POWER_KEY: sums[1] / n}
            return dict(self._last)

    def close(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5 * self._interval + 1.0)
