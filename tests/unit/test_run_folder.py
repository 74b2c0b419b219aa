"""The run folder keeps every launch's resolved config: the first stays config.toml, a launch with
another config adds config_NNNN.toml (sorted by launch), an identical relaunch writes nothing."""

from __future__ import annotations

from pathlib import Path

from trainer.trainer import keep_launch_config


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
