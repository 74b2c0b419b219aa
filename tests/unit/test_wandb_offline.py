"""wandb through MetricsLogger with a real offline run, read back from the .wandb file itself."""

from __future__ import annotations

import logging
import random
import sys
import threading

import pytest

from tests.helpers.wandb_reader import read_wandb_config, read_wandb_history, wandb_files
from trainer.config.schema import JobConfig
from trainer.metric_sinks import wandb_api_key_configured
from trainer.metrics import MetricsLogger, StepMeter

pytest.importorskip("wandb")


@pytest.fixture
def no_api_key(monkeypatch, tmp_path):
    """A machine with no wandb credentials: no key in the environment, a HOME without .netrc."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for var in ("WANDB_API_KEY", "WANDB_MODE", "NETRC", "WANDB_BASE_URL", "WANDB_DIR", "WANDB_RUN_ID", "WANDB_RESUME"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("WANDB_SILENT", "true")
    monkeypatch.setenv("WANDB_DISABLE_GIT", "true")
    # wandb keeps settings under ~/.config/wandb; point it into the temporary HOME as well.
    monkeypatch.setenv("WANDB_CONFIG_DIR", str(home / ".config" / "wandb"))
    assert not wandb_api_key_configured()
    return home


def _cfg() -> JobConfig:
    cfg = JobConfig()
    cfg.run.name = "wandb-offline-test"
    cfg.metrics.enable_wandb = True
    cfg.metrics.wandb_project = "titankit-tests"
    return cfg


def _values(rng: random.Random, loss: float, step: int) -> dict:
    clock = [10.0]
    meter = StepMeter(2.0e9, 989e12, device="cpu", clock=lambda: clock[0])
    meter.add_step(2048, 0.004)
    clock[0] += rng.uniform(0.2, 0.4)
    return {
        **meter.collect(),
        "loss_metrics/global_avg_loss": loss,
        "grad_norm": rng.uniform(0.5, 2.0),
        "lr": 3e-4,
        "n_tokens_seen": 2048 * step,
    }


def test_offline_history_config_and_resume(tmp_path, no_api_key, logs):
    rng = random.Random(11)
    run_dir = tmp_path / "run"
    losses = {s: rng.uniform(2.0, 10.0) for s in range(1, 9)}
    cfg = _cfg()
    # A 40 KB config value spans two 32 KiB blocks: exercises the reader's first/last chunks.
    big = "".join(rng.choice("abcdef") for _ in range(40_000))
    config = {"training": {"steps": 8, "seq_len": 2048}, "notes": big}

    ml = MetricsLogger(cfg, run_dir, rank=0, config=config)
    assert ml.wandb_active
    for step in range(1, 6):
        ml.log(step, _values(rng, losses[step], step))
    ml.close()
    run_id = (run_dir / "wandb_run_id").read_text().strip()
    files = wandb_files(run_dir)
    assert len(files) == 1 and files[0].name == f"run-{run_id}.wandb"

    history = read_wandb_history(run_dir)
    assert [row["_step"] for row in history] == [1, 2, 3, 4, 5]
    for row in history:
        assert row["loss_metrics/global_avg_loss"] == losses[row["_step"]]  # JSON round-trips floats
        assert row["mfu(%)"] == pytest.approx(100 * row["tflops"] * 1e12 / 989e12, rel=1e-12)
        assert row["n_tokens_seen"] == 2048 * row["_step"]
    got_config = read_wandb_config(run_dir)
    assert got_config["training"] == {"steps": 8, "seq_len": 2048}
    assert got_config["notes"] == big

    # A resumed process continues the same wandb run id; a replayed step is skipped with a warning.
    with MetricsLogger(cfg, run_dir, rank=0, config=config) as ml2:
        assert ml2.wandb_active
        for step in (6, 7, 7, 8):
            ml2.log(step, _values(rng, losses[step], step))
    assert (run_dir / "wandb_run_id").read_text().strip() == run_id
    files = wandb_files(run_dir)
    assert len(files) == 2 and all(f.name == f"run-{run_id}.wandb" for f in files)
    history = read_wandb_history(run_dir)
    assert [row["_step"] for row in history] == list(range(1, 9))
    assert [row["loss_metrics/global_avg_loss"] for row in history] == [losses[s] for s in range(1, 9)]
    assert len([w for w in logs.at(logging.WARNING) if "step 7 <= last logged step 7" in w]) == 1
    # metrics.jsonl keeps every logged line, the replayed one included.
    assert len((run_dir / "metrics.jsonl").read_text().splitlines()) == 9


def test_wandb_init_raising_keeps_training(tmp_path, no_api_key, logs, monkeypatch):
    import wandb

    def broken_init(**kwargs):
        raise ConnectionError("wandb service unreachable")

    monkeypatch.setattr(wandb, "init", broken_init)
    with MetricsLogger(_cfg(), tmp_path, rank=0) as ml:
        assert not ml.wandb_active
        ml.log(1, _values(random.Random(1), 3.25, 1))
    warnings = logs.at(logging.WARNING)
    assert len(warnings) == 1 and "wandb service unreachable" in warnings[0]
    assert (tmp_path / "metrics.jsonl").read_text().count("\n") == 1


def test_wandb_init_hanging_is_bounded(tmp_path, no_api_key, logs, monkeypatch):
    import wandb

    release = threading.Event()

    def hanging_init(**kwargs):
        release.wait(60)
        raise TimeoutError("released by the test")

    monkeypatch.setattr(wandb, "init", hanging_init)
    try:
        with MetricsLogger(_cfg(), tmp_path, rank=0, wandb_init_timeout=0.2) as ml:
            assert not ml.wandb_active
            ml.log(1, _values(random.Random(2), 4.5, 1))
    finally:
        release.set()
    warnings = logs.at(logging.WARNING)
    assert len(warnings) == 1 and "no answer within 0.2 s" in warnings[0]


def test_wandb_not_installed_warns_once(tmp_path, logs, monkeypatch):
    # sys.modules[name] = None is how Python marks a module as not importable.
    monkeypatch.setitem(sys.modules, "wandb", None)
    with MetricsLogger(_cfg(), tmp_path, rank=0) as ml:
        assert not ml.wandb_active
        ml.log(1, _values(random.Random(3), 5.0, 1))
    warnings = logs.at(logging.WARNING)
    assert len(warnings) == 1 and "not installed" in warnings[0]


def test_netrc_entry_counts_as_api_key(no_api_key, monkeypatch):
    netrc_path = no_api_key / ".netrc"
    netrc_path.write_text("machine api.wandb.ai\n  login user\n  password 0123456789abcdef\n")
    netrc_path.chmod(0o600)
    assert wandb_api_key_configured()
    monkeypatch.setenv("WANDB_BASE_URL", "https://wandb.example.com")
    assert not wandb_api_key_configured()  # the entry is for another host
