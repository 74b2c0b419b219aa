"""A preemption signal while the run starts (model build, checkpoint load, wandb) is not lost.

scripts/train.sh starts the ranks with SIGUSR1 ignored, and SIGTERM's default ends a process, so
before trainer/train.py installs its watcher first thing, a Slurm `--signal=USR1@T` that landed during
a minutes-long start-up was dropped (the job trained on until killed, unsaved) and a SIGTERM failed
the job. Now the run stops before its first step, exit 0 with checkpoints (nothing new to save),
128 + the signal without, as after any step. The signal is sent from inside load_config: after the
watcher is installed, before the Trainer exists.
"""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest

import trainer.config as config_module

LOAD_CONFIG = config_module.load_config  # the real one (launch() patches the module's name)



def launch(tmp_path, monkeypatch, *extra: str, signum: int | None = signal.SIGUSR1) -> int:
    """trainer.train.main in this process (a 1-rank group), `signum` sent to itself mid-start-up."""
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    def load_then_signal(argv):
        if signum is not None:
            os.kill(os.getpid(), signum)
        return LOAD_CONFIG(argv)

    monkeypatch.setattr(config_module, "load_config", load_then_signal)
    args = [*tiny_trainer_args(tmp_path), *extra]
    with in_process_trainer_env(monkeypatch):
        return main(args)


def rows(tmp_path, name: str = "default") -> list[int]:
    path = tmp_path / name / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def test_a_signal_during_startup_stops_before_the_first_step_and_keeps_the_checkpoint(
        tmp_path, monkeypatch, logs):
    before = {s: signal.getsignal(s) for s in (signal.SIGTERM, signal.SIGUSR1)}
    common = ("--run.name=default", "--checkpoint.enable=true", "--checkpoint.interval=2")
    assert launch(tmp_path, monkeypatch, *common, "--training.steps=2", signum=None) == 0
    assert rows(tmp_path) == [1, 2]
    assert launch(tmp_path, monkeypatch, *common, "--training.steps=4") == 0
    assert rows(tmp_path) == [1, 2]  # no step trained
    assert sorted(p.name for p in (tmp_path / "default" / "checkpoint").iterdir()) == ["step-2"]
    assert ("preemption signal during start-up: stopping before step 3 with nothing new to save "
            "(a relaunch continues from the checkpoint of step 2)") in logs.at(logging.WARNING)
    # A relaunch without a signal goes on from step 2; the handlers before the run are back.
    assert launch(tmp_path, monkeypatch, *common, "--training.steps=4", signum=None) == 0
    assert rows(tmp_path) == [1, 2, 3, 4]
    assert {s: signal.getsignal(s) for s in before} == before


def test_without_checkpoints_a_startup_signal_exits_unsaved(tmp_path, monkeypatch, logs):
    with pytest.raises(SystemExit) as stop:
        launch(tmp_path, monkeypatch, "--run.name=default", "--training.steps=3", signum=signal.SIGTERM)
    assert stop.value.code == 128 + signal.SIGTERM
    assert rows(tmp_path) == []
    assert any(m.startswith("preemption signal (SIGTERM) during start-up, before step 1: this launch "
                            "trained nothing and checkpoint.enable is false; exiting with status 143")
               for m in logs.at(logging.WARNING))
