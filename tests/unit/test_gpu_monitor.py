"""The GPU clock/power sampler: means per log period, a failing reader never stops training, and
the metrics reach the log line and the benchmark table only where NVML can read them."""

from __future__ import annotations

import time

import pytest
import torch

from trainer.gpu_monitor import CLOCK_KEY, POWER_KEY, GpuSampler
from trainer.log import logger as tk_logger
from trainer.metrics import StepMeter, format_console_line


def _wait_for_samples(sampler: GpuSampler, reading: list, n: int = 3) -> None:
    """Let the thread take at least n samples of the current reading."""
    before = reading[2]
    deadline = time.monotonic() + 10
    while reading[2] < before + n:
        assert time.monotonic() < deadline, "sampler thread took no samples in 10 s"
        time.sleep(0.005)


def _reader(reading: list):
    def read():
        reading[2] += 1
        return reading[0], reading[1]
    return read


def test_means_cover_only_the_period_since_the_last_take():
    reading = [1500.0, 650.0, 0]  # MHz, W, calls
    sampler = GpuSampler(_reader(reading), interval_s=0.005)
    try:
        _wait_for_samples(sampler, reading)
        assert sampler.take() == {CLOCK_KEY: 1500.0, POWER_KEY: 650.0}
        reading[0], reading[1] = 1980.0, 400.0
        sampler.take()  # drops anything sampled while the values changed
        _wait_for_samples(sampler, reading)
        assert sampler.take() == {CLOCK_KEY: 1980.0, POWER_KEY: 400.0}
    finally:
        sampler.close()
    assert not sampler._thread.is_alive()


def test_a_short_period_repeats_the_previous_means_and_nothing_before_the_first_sample():
    reading = [1700.0, 700.0, 0]
    sampler = GpuSampler(_reader(reading), interval_s=3600)  # never samples within this test
    try:
        assert sampler.take() == {}
    finally:
        sampler.close()
    sampler = GpuSampler(_reader(reading), interval_s=0.005)
    try:
        _wait_for_samples(sampler, reading)
        first = sampler.take()
        sampler._stop.set()
        sampler._thread.join()
        assert sampler.take() == first == {CLOCK_KEY: 1700.0, POWER_KEY: 700.0}
    finally:
        sampler.close()


def test_a_failing_reader_stops_the_sampler_with_a_warning(caplog):
    def read():
        raise RuntimeError("NVML: GPU is lost")

    tk_logger.addHandler(caplog.handler)  # the project logger does not propagate once set up
    try:
        sampler = GpuSampler(read, interval_s=0.005)
        sampler._thread.join(timeout=10)
    finally:
        tk_logger.removeHandler(caplog.handler)
    assert not sampler._thread.is_alive()
    assert sampler.take() == {}
    assert any("GPU sampler stopped: RuntimeError: NVML: GPU is lost" in r.getMessage() for r in caplog.records)
    sampler.close()


def test_no_sampler_on_cpu_and_interval_must_be_positive():
    assert GpuSampler.for_device(torch.device("cpu")) is None
    with pytest.raises(ValueError, match="interval_s must be > 0"):
        GpuSampler(lambda: (0.0, 0.0), interval_s=0)


def test_step_meter_adds_the_means_and_the_console_line_shows_them():
    reading = [1755.0, 699.5, 0]
    sampler = GpuSampler(_reader(reading), interval_s=0.005)
    try:
        meter = StepMeter(1e6, None, gpu=sampler)
        _wait_for_samples(sampler, reading)
        meter.add_step(1000)
        row = meter.collect()
    finally:
        sampler.close()
    assert row[CLOCK_KEY] == 1755.0 and row[POWER_KEY] == 699.5
    row.update({"loss_metrics/global_avg_loss": 2.5, "grad_norm": 1.0, "lr": 1e-4})
    assert "gpu 1,755 MHz 700 W" in format_console_line(3, row)
    # Without a sampler (CPU) the keys are absent and the line is unchanged.
    plain = StepMeter(1e6, None)
    plain.add_step(1000)
    row = plain.collect()
    assert CLOCK_KEY not in row
    row.update({"loss_metrics/global_avg_loss": 2.5, "grad_norm": 1.0, "lr": 1e-4})
    assert "gpu" not in format_console_line(3, row)
