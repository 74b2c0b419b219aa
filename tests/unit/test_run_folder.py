"""The run folder keeps every launch's resolved config: the first stays config.toml, a launch with
another config adds config_NNNN.toml (sorted by launch), an identical relaunch writes nothing."""

from __future__ import annotations

from pathlib import Path

from trainer.trainer import keep_launch_config, record_launch_config


def files(run: Path) -> dict[str, str]:
    return {p.name: p.read_text() for p in sorted(run.iterdir())}


def test_every_launch_config_is_kept_in_launch_order(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert keep_launch_config(run, "A") == run / "config.toml"
    assert keep_launch_config(run, "A") is None  # a plain resume: nothing new
    assert files(run) == {"config.toml": "A"}
    assert keep_launch_config(run, "B") == run / "config_0002.toml"
    assert keep_launch_config(run, "B") is None
    # Back to the first config: a new launch of it after B, so it is recorded again, in order.
    assert keep_launch_config(run, "A") == run / "config_0003.toml"
    assert files(run) == {"config.toml": "A", "config_0002.toml": "B", "config_0003.toml": "A"}
    assert sorted(files(run)) == ["config.toml", "config_0002.toml", "config_0003.toml"]


def test_each_launch_learns_the_file_its_checkpoints_record(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert record_launch_config(run, "A") == "config.toml"
    assert record_launch_config(run, "A") == "config.toml"  # identical relaunch: the same file
    assert record_launch_config(run, "B") == "config_0002.toml"
    assert record_launch_config(run, "B") == "config_0002.toml"
    assert record_launch_config(run, "A") == "config_0003.toml"


def test_a_relaunch_without_checkpointing_says_it_ignores_the_saved_steps(tmp_path, monkeypatch):
    """checkpoint.enable = false on a run folder with checkpoints starts over: it must say so."""
    import logging

    from tests.helpers.one_rank import in_process_trainer_env
    from trainer.config import load_config
    from trainer.trainer import Trainer

    common = ["--model.overrides.n_layers=1", "--model.overrides.dim=32", "--model.overrides.n_heads=2",
              "--model.overrides.n_kv_heads=1", "--training.seq_len=16", "--training.local_batch_size=2",
              "--training.steps=2", "--lr_scheduler.warmup_steps=1", f"--run.dump_folder={tmp_path}",
              f"--data.cache_dir={tmp_path / 'cache'}"]
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    grab = Grab()
    logging.getLogger("titankit").addHandler(grab)
    try:
        with in_process_trainer_env(monkeypatch):
            first = Trainer(load_config([*common, "--checkpoint.enable", "--checkpoint.interval=2"]))
            first.train()
            first.close()
            assert not [r for r in records if "are not loaded" in r]
            second = Trainer(load_config([*common, "--checkpoint.enable=false"]))
            second.close()
    finally:
        logging.getLogger("titankit").removeHandler(grab)
    hits = [r for r in records if "checkpoint.enable = false" in r]
    assert len(hits) == 1 and "(steps 2)" in hits[0] and "resume from step 2" in hits[0], records
