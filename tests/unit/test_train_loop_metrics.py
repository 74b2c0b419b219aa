"""The train loop's metrics rows as a user reads them: which steps get a row, and what the
throughput of a row covers. In-process 1-rank runs of a tiny model (about a second each)."""

from __future__ import annotations

import json
import time


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


def test_checkpoint_saves_and_trace_exports_are_not_counted_as_step_time(tmp_path, monkeypatch):
    # A synchronous save (minutes for a large model) or a profiler trace export between two log
    # steps made the next row's tokens/s and MFU drop by that much: Megatron stops its interval
    # timer around a save for the same reason. Each is made to take 0.5 s here.
    from trainer.checkpoint import CheckpointManager
    from trainer.profiling import StepProfiler

    save, save_trace = CheckpointManager.save, StepProfiler._save_trace

    def slow(write):
        def slowed(*args, **kwargs):
            time.sleep(0.5)
            return write(*args, **kwargs)
        return slowed

    monkeypatch.setattr(CheckpointManager, "save", slow(save))
    monkeypatch.setattr(StepProfiler, "_save_trace", slow(save_trace))
    assert launch(tmp_path, monkeypatch, "--checkpoint.enable=true", "--checkpoint.interval=2",
                  "--profiling.enable_profiling", "--profiling.profile_start_step=5",
                  "--profiling.profile_steps=2", "--training.steps=8", "--metrics.log_freq=4") == 0
    assert (tmp_path / "r" / "profile_traces" / "step-6" / "summary.md").exists()
    got = rows(tmp_path)
    # Row 4 covers steps 2-4 (step 2's save), row 8 steps 5-8 (step 6's save and export).
    for step in (4, 8):
        assert got[step]["time_metrics/end_to_end(s)"] < 0.1, (step, got[step])
