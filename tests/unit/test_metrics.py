"""Peak table, throughput/MFU arithmetic, StepMeter and the JSONL/console logger (no wandb here)."""

from __future__ import annotations

import json
import logging
import math
import random
import sys

import pytest

from trainer.config.schema import JobConfig
from trainer.metrics import (
    METRIC_KEYS,
    MetricsLogger,
    StepMeter,
    peak_flops,
    resolve_peak_flops,
    throughput,
)


@pytest.mark.parametrize(
    "name, peak",
    [
        ("NVIDIA H200", 989e12),
        ("NVIDIA H100 80GB HBM3", 989e12),
        ("NVIDIA B200", 2.25e15),
        ("NVIDIA GB200", 2.5e15),
        ("NVIDIA A100-SXM4-80GB", 312e12),
        ("NVIDIA A100-PCIE-40GB", 312e12),
        ("NVIDIA H100 PCIe", 756e12),
        ("NVIDIA H100 NVL", 835e12),
        ("NVIDIA H200 NVL", 835e12),
    ],
)
def test_peak_table_hits(name, peak, logs):
    assert peak_flops(name) == peak
    assert logs.at(logging.WARNING) == []


def test_pcie_and_nvl_never_get_the_sxm_peak():
    assert peak_flops("NVIDIA H100 PCIe") < peak_flops("NVIDIA H100 80GB HBM3")
    assert peak_flops("NVIDIA H100 NVL") < peak_flops("NVIDIA H100 80GB HBM3")
    assert peak_flops("NVIDIA H100 PCIe") != peak_flops("NVIDIA H100 NVL")


@pytest.mark.parametrize(
    "name", ["cpu", "AMD Instinct MI300X", "NVIDIA H100", "NVIDIA GeForce RTX 4090", "NVIDIA H100 80GB HBM3 MIG 1g.10gb"]
)
def test_unknown_device_gets_none_and_one_warning(name, logs):
    assert peak_flops(name) is None
    warnings = logs.at(logging.WARNING)
    assert len(warnings) == 1
    assert "peak_tflops" in warnings[0]


def test_peak_tflops_override_wins_without_warning(logs):
    cfg = JobConfig()
    cfg.metrics.peak_tflops = 1234.5
    assert resolve_peak_flops(cfg.metrics, "cpu") == pytest.approx(1234.5e12)
    assert logs.at(logging.WARNING) == []
    cfg.metrics.peak_tflops = 0.0
    assert resolve_peak_flops(cfg.metrics, "cpu") is None
    assert len(logs.at(logging.WARNING)) == 1
    assert resolve_peak_flops(cfg.metrics, "cpu", rank=1) is None
    assert len(logs.at(logging.WARNING)) == 1  # other ranks see the same device: one warning per job
    cfg.metrics.peak_tflops = -1.0
    with pytest.raises(ValueError, match="peak_tflops"):
        resolve_peak_flops(cfg.metrics, "cpu")


def test_llama8b_h200_mfu_known_numbers():
    # 8B: 5.79e10 FLOPs/token at 8,590 tokens/s/GPU on a 989 TFLOP/s H200 -> 50.29% MFU.
    tokens, elapsed = 8590 * 12.5, 12.5
    tps, tflops, mfu = throughput(tokens, elapsed, 1, 1, 5.79e10, 989e12)
    assert tps == pytest.approx(8590.0, rel=1e-12)
    assert tflops == pytest.approx(497.361, rel=1e-6)
    assert mfu == pytest.approx(50.2893, abs=1e-3)


def test_cp_tp_divide_tokens_and_unknown_peak_gives_no_mfu():
    rng = random.Random(7)
    for _ in range(20):
        tokens, elapsed = rng.randint(1000, 10**7), rng.uniform(0.1, 100)
        cp, tp, fpt = rng.choice([1, 2, 4]), rng.choice([1, 2, 8]), rng.uniform(1e9, 1e12)
        tps, tflops, mfu = throughput(tokens, elapsed, cp, tp, fpt, None)
        assert tps == pytest.approx(tokens / elapsed / (cp * tp), rel=1e-12)
        assert tflops == pytest.approx(fpt * tps / 1e12, rel=1e-12)
        assert mfu is None
    with pytest.raises(ValueError):
        throughput(100, 0.0, 1, 1, 1e9, 1e15)


class _FakeClock:
    """A settable clock, so elapsed time is exact."""

    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def test_step_meter_periods():
    clock = _FakeClock()
    meter = StepMeter(3.3e9, 989e12, cp=2, tp=4, device="cpu", clock=clock)
    data_s = [0.013, 0.021, 0.017]
    for d in data_s:
        meter.add_step(4096 * 3, d)
    clock.t += 1.6
    out = meter.collect()
    tps = 3 * 4096 * 3 / (1.6 * 2 * 4)
    assert out["throughput(tps)"] == pytest.approx(tps, rel=1e-9)
    assert out["tflops"] == pytest.approx(3.3e9 * tps / 1e12, rel=1e-9)
    assert out["mfu(%)"] == pytest.approx(100 * 3.3e9 * tps / 989e12, rel=1e-9)
    assert out["time_metrics/end_to_end(s)"] == pytest.approx(1.6 / 3, rel=1e-9)
    assert out["time_metrics/data_loading(%)"] == pytest.approx(100 * sum(data_s) / 1.6, rel=1e-9)
    # no allocator peaks off CUDA: null, not a 0.0 that reads as "nothing allocated"
    assert out["memory/max_active(GiB)"] is None and out["memory/max_reserved(GiB)"] is None
    assert out["memory/num_alloc_retries"] == 0
    # The next period starts at collect(): its numbers do not include the first one.
    meter.add_step(1000, 0.0)
    clock.t += 0.5
    assert meter.collect()["throughput(tps)"] == pytest.approx(1000 / (0.5 * 8), rel=1e-9)
    with pytest.raises(ValueError, match="before any add_step"):
        meter.collect()


def _values(rng: random.Random, step: int) -> dict:
    clock = _FakeClock()
    meter = StepMeter(rng.uniform(1e9, 1e10), None, device="cpu", clock=clock)
    meter.add_step(rng.randint(100, 5000), rng.uniform(0.001, 0.01))
    clock.t += rng.uniform(0.5, 2.0)
    return {
        **meter.collect(),
        "loss_metrics/global_avg_loss": rng.uniform(2.0, 11.0),
        "grad_norm": rng.uniform(0.1, 5.0),
        "lr": rng.uniform(1e-5, 1e-3),
        "n_tokens_seen": 4096 * step,
        "moe/router_entropy": rng.uniform(0.0, 3.0),
    }


def test_jsonl_holds_every_key_each_step(tmp_path, logs):
    rng = random.Random(3)
    cfg = JobConfig()
    sent = {}
    with MetricsLogger(cfg, tmp_path / "run", rank=0) as ml:
        for step in (1, 10, 20, 30):
            sent[step] = _values(rng, step)
            ml.log(step, sent[step])
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    rows = [json.loads(line) for line in lines]
    assert [r["step"] for r in rows] == [1, 10, 20, 30]
    for row in rows:
        assert set(METRIC_KEYS) | {"step", "moe/router_entropy"} == set(row)
        assert row["mfu(%)"] is None  # no peak known
        for k, v in sent[row["step"]].items():
            assert row[k] == (None if v is None else pytest.approx(v, rel=1e-15))
    console = logs.at(logging.INFO)
    assert len(console) == 4 and "loss" in console[0] and "mfu n/a" in console[0]


def test_jsonl_is_flushed_per_line_and_appends_on_resume(tmp_path):
    rng = random.Random(5)
    cfg = JobConfig()
    ml = MetricsLogger(cfg, tmp_path, rank=0)
    ml.log(1, _values(rng, 1))
    # Not closed yet: the line must already be on disk (a crash loses nothing).
    assert len((tmp_path / "metrics.jsonl").read_text().splitlines()) == 1
    ml.close()
    with MetricsLogger(cfg, tmp_path, rank=0) as ml2:
        bad = _values(rng, 2)
        bad["loss_metrics/global_avg_loss"] = math.nan
        ml2.log(2, bad)
    rows = [json.loads(x) for x in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in rows] == [1, 2]
    assert rows[1]["loss_metrics/global_avg_loss"] is None  # strict JSON: NaN is written as null


def test_missing_key_is_an_error(tmp_path):
    vals = _values(random.Random(1), 1)
    del vals["grad_norm"]
    with MetricsLogger(JobConfig(), tmp_path, rank=0) as ml:
        with pytest.raises(ValueError, match="grad_norm"):
            ml.log(1, vals)


def test_other_ranks_write_nothing(tmp_path, logs):
    cfg = JobConfig()
    cfg.metrics.enable_wandb = True
    run_dir = tmp_path / "run"
    with MetricsLogger(cfg, run_dir, rank=3) as ml:
        ml.log(1, _values(random.Random(2), 1))
    assert not run_dir.exists()
    assert logs.records == []


def test_tensorboard_scalars_read_back(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    rng = random.Random(9)
    cfg = JobConfig()
    cfg.metrics.enable_tensorboard = True
    sent = {}
    with MetricsLogger(cfg, tmp_path, rank=0) as ml:
        for step in (1, 5, 9):
            sent[step] = _values(rng, step)
            ml.log(step, sent[step])
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    loss = acc.Scalars("loss_metrics/global_avg_loss")
    assert [e.step for e in loss] == [1, 5, 9]
    for e in loss:  # TensorBoard stores float32
        assert e.value == pytest.approx(sent[e.step]["loss_metrics/global_avg_loss"], rel=1e-6)
    assert "mfu(%)" not in acc.Tags()["scalars"]  # None (no peak) is not plotted as a value


def test_tensorboard_missing_is_a_clear_error_on_every_rank(tmp_path, monkeypatch):
    # sys.modules[name] = None is how Python marks a module as not importable.
    monkeypatch.setitem(sys.modules, "tensorboard", None)
    cfg = JobConfig()
    cfg.metrics.enable_tensorboard = True
    for rank in (0, 1):
        with pytest.raises(ImportError, match=r"pip install tensorboard"):
            MetricsLogger(cfg, tmp_path, rank=rank)


def test_alloc_retries_are_counted_per_period_and_shown_on_the_console(monkeypatch):
    """The allocator's counter is cumulative; each log step reports the retries of its own period,
    and the console line names them (they stall the GPU with no other sign in the memory figures)."""
    from trainer.metrics import format_console_line

    counter = iter([3, 10, 10])  # at construction, then at two collects
    monkeypatch.setattr(StepMeter, "_memory_gib", lambda self: (0.0, 0.0, next(counter)))
    meter = StepMeter(1e9, None, device="cpu")
    meter.add_step(100)
    first = meter.collect()
    meter.add_step(100)
    second = meter.collect()
    assert first["memory/num_alloc_retries"] == 7 and second["memory/num_alloc_retries"] == 0
    row = {"loss_metrics/global_avg_loss": 2.0, "grad_norm": 1.0, "lr": 1e-4, **first}
    assert "alloc retries 7" in format_console_line(5, row)
    assert "alloc retries" not in format_console_line(6, {**row, **second})
