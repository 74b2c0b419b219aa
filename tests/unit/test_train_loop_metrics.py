"""The train loop's metrics rows as a user reads them: which steps get a row, and what the
throughput of a row covers. In-process 1-rank runs of a tiny model (about a second each)."""

from __future__ import annotations

import json


def launch(tmp_path, monkeypatch, *extra: str) -> int:
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    with in_process_trainer_env(monkeypatch):
        return main([*tiny_trainer_args(tmp_path), "--run.name=r", *extra])


def rows(tmp_path) -> dict[int, dict]:
    lines = (tmp_path / "r" / "metrics.jsonl").read_text().splitlines()
    return {row["step"]: row for row in map(json.loads, lines)}


CKPT = ("--checkpoint.enable=true", "--checkpoint.interval=4")


def test_the_first_step_of_a_resumed_launch_gets_its_own_row(tmp_path, monkeypatch):
    # A launch's first step carries its warm-up (compile, allocator, communicator start-up): a
    # fresh run logs step 1 alone for that reason, and a resumed launch must too, or its first row
    # averages the warm-up into log_freq - 1 steady steps and shows a throughput that is too low.
    assert launch(tmp_path, monkeypatch, *CKPT, "--training.steps=4", "--metrics.log_freq=3") == 0
    assert sorted(rows(tmp_path)) == [1, 3, 4]
    assert launch(tmp_path, monkeypatch, *CKPT, "--training.steps=10", "--metrics.log_freq=3") == 0
    assert sorted(rows(tmp_path)) == [1, 3, 4, 5, 6, 9, 10]

