"""Ctrl-C (SIGINT) on a training rank: the first, once the loop runs, stops after the current step
and saves it (exit 0; a relaunch continues); a second stops at once with one line and status 130;
one during start-up stops at once. Before, every Ctrl-C was a KeyboardInterrupt traceback per rank
that lost every step since the last checkpoint. In-process 1-rank runs; the signal is sent by the
rank to itself from inside a step, as scripts/train.sh forwards it.
"""

from __future__ import annotations

import json
import logging
import os
import signal

import pytest

import trainer.config as config_module
from trainer.train import INTERRUPTED
from trainer.trainer import Trainer

LOAD_CONFIG = config_module.load_config
TRAIN_STEP = Trainer.train_step


def launch(tmp_path, monkeypatch, *extra: str, at_step: int | None = None, times: int = 1,
           at_startup: bool = False) -> int:
    """trainer.train.main in this process; `times` SIGINTs sent during step `at_step` (or while the
    config loads)."""
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    def interrupt() -> None:
        for _ in range(times):
            os.kill(os.getpid(), signal.SIGINT)

    def step(self):
        if self.step + 1 == at_step:
            interrupt()
        return TRAIN_STEP(self)

    def load(argv):
        if at_startup:
            interrupt()
        return LOAD_CONFIG(argv)

    monkeypatch.setattr(Trainer, "train_step", step)
    monkeypatch.setattr(config_module, "load_config", load)
    with in_process_trainer_env(monkeypatch):
        return main([*tiny_trainer_args(tmp_path), "--run.name=r", *extra])


def rows(tmp_path) -> list[int]:
    path = tmp_path / "r" / "metrics.jsonl"
    return [json.loads(line)["step"] for line in path.read_text().splitlines()] if path.exists() else []


def saved(tmp_path) -> list[str]:
    folder = tmp_path / "r" / "checkpoint"
    return sorted(p.name for p in folder.iterdir()) if folder.is_dir() else []


CKPT = ("--checkpoint.enable=true", "--checkpoint.interval=100")


def test_first_ctrl_c_finishes_the_step_saves_it_and_a_relaunch_continues(tmp_path, monkeypatch,
                                                                         logs, capfd):
    before = signal.getsignal(signal.SIGINT)
    assert launch(tmp_path, monkeypatch, *CKPT, "--training.steps=50", at_step=3) == 0
    assert rows(tmp_path) == [1, 2, 3]
    assert saved(tmp_path) == ["step-3"]
    assert ("[rank0] Ctrl-C: stopping after this step, once it is saved; Ctrl-C again stops at "
            "once, unsaved") in capfd.readouterr().err
    warnings = logs.at(logging.WARNING)
    assert "Ctrl-C: saving a checkpoint of step 3" in warnings
    assert ("Ctrl-C: checkpoint of step 3 saved, exiting; relaunch the same command to continue"
            in warnings)
    assert signal.getsignal(signal.SIGINT) == before
    # The same command continues from step 3.
    assert launch(tmp_path, monkeypatch, *CKPT, "--training.steps=5") == 0
    assert rows(tmp_path) == [1, 2, 3, 4, 5]


def test_first_ctrl_c_without_checkpoints_stops_after_the_step_with_status_130(tmp_path, monkeypatch,
                                                                              logs, capfd):
    with pytest.raises(SystemExit) as stop:
        launch(tmp_path, monkeypatch, "--training.steps=50", at_step=2)
    assert stop.value.code == INTERRUPTED == 130
    assert rows(tmp_path) == [1, 2]
    assert "(checkpoint.enable is false: nothing is saved); Ctrl-C again stops at once\n" in (
        capfd.readouterr().err)
    assert any(m.startswith("Ctrl-C (SIGINT) after step 2: nothing is saved because "
                            "checkpoint.enable is false; exiting with status 130")
               for m in logs.at(logging.WARNING))


def test_second_ctrl_c_stops_at_once_naming_the_checkpoint_a_relaunch_uses(tmp_path, monkeypatch,
                                                                           capfd):
    before = signal.getsignal(signal.SIGINT)
    status = launch(tmp_path, monkeypatch, "--checkpoint.enable=true", "--checkpoint.interval=2",
                    "--training.steps=50", at_step=4, times=2)
    assert status == INTERRUPTED
    assert rows(tmp_path) == [1, 2, 3]  # step 4 did not finish
    assert saved(tmp_path) == ["step-2"]
    err = capfd.readouterr().err
    assert ("[rank0] stopped by Ctrl-C after step 3: a relaunch continues from step-2 (step 3 is not "
            "saved)\n") in err
    assert "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) == before


def test_ctrl_c_during_startup_stops_at_once(tmp_path, monkeypatch, capfd):
    before = signal.getsignal(signal.SIGINT)
    assert launch(tmp_path, monkeypatch, *CKPT, "--training.steps=5", at_startup=True) == INTERRUPTED
    assert rows(tmp_path) == [] and saved(tmp_path) == []
    err = capfd.readouterr().err
    assert "[rank0] stopped by Ctrl-C during start-up: this launch trained nothing\n" in err
    assert "Traceback" not in err
    assert signal.getsignal(signal.SIGINT) == before


@pytest.mark.filterwarnings("ignore:torch.distributed is disabled")
def test_the_stop_names_unsaved_steps_and_an_abandoned_write(tmp_path):
    from types import SimpleNamespace

    from trainer.checkpoint import CheckpointManager

    manager = object.__new__(CheckpointManager)  # only what relaunch_note reads
    manager.enabled, manager.root, manager._pending = True, tmp_path / "checkpoint", None
    assert manager.relaunch_note(0) == "this run has no complete checkpoint yet"
    assert manager.relaunch_note(7) == ("this run has no complete checkpoint yet (steps 1-7 are not "
                                        "saved)")
    import torch
    import torch.distributed.checkpoint as dcp

    for step in (2, 4):  # complete folders (trainer/checkpoint_folders.py checks them)
        dcp.save({"x": torch.zeros(2)}, checkpoint_id=manager.root / f"step-{step}", no_dist=True)
    (manager.root / "step-6").mkdir()  # being written
    manager._pending = SimpleNamespace(step=6)
    assert manager.relaunch_note(7) == ("a relaunch continues from step-4 (steps 5-7 are not saved); "
                                        "the write of step-6 in flight is abandoned (a relaunch "
                                        "skips its folder)")
