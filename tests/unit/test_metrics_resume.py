"""MetricsLogger.resumed_at: after a resume from step N, metrics.jsonl holds each step once, the
earlier attempts' rows after N are kept in metrics.superseded.jsonl, and TensorBoard and wandb
show no step twice."""

from __future__ import annotations

import json
import logging
import os
import random
import types

import pytest

from trainer.config.schema import JobConfig
from trainer.metrics import MetricsLogger, StepMeter
from trainer.metrics_superseded import move_rows_after


def _values(loss: float, step: int) -> dict:
    clock = [0.0]
    meter = StepMeter(1e9, None, device="cpu", clock=lambda: clock[0])
    meter.add_step(1024)
    clock[0] += 0.5
    return {**meter.collect(), "loss_metrics/global_avg_loss": loss, "grad_norm": 1.0, "lr": 1e-4,
            "n_tokens_seen": 1024 * step}


def _log(run_dir, steps, losses, cfg=None, resume_at=None) -> None:
    """One attempt of a run: a fresh process's logger, a resume (if any), then its log steps."""
    with MetricsLogger(cfg or JobConfig(), run_dir, rank=0) as ml:
        if resume_at is not None:
            ml.resumed_at(resume_at)
        for step in steps:
            ml.log(step, _values(losses[step], step))


def _lines(path) -> list[str]:
    return path.read_text().splitlines()


def _steps(path) -> list:
    out = []
    for line in _lines(path):
        try:
            out.append(json.loads(line).get("step", "no step"))
        except ValueError:
            out.append("bad")
    return out


def _crashed_run(run_dir, losses) -> None:
    """Steps 1-6 logged by a run whose checkpoint was at step 4, plus two lines that are not rows
    with a step: a torn half line and a hand-written note."""
    _log(run_dir, [1, 2, 3], losses)
    with open(run_dir / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss_metr\n{"note": "restarted by hand"}\n')
    _log(run_dir, [4, 5, 6], losses)


def test_resume_moves_the_replayed_steps_and_keeps_everything_else(tmp_path, logs):
    rng = random.Random(1)
    first = {s: rng.uniform(2, 10) for s in range(1, 7)}
    second = {s: rng.uniform(2, 10) for s in range(1, 7)}
    _crashed_run(tmp_path, first)
    before = _lines(tmp_path / "metrics.jsonl")

    _log(tmp_path, [5, 6], second, resume_at=4)

    # Each step once; the unusable lines stay where they were; then the new attempt's rows.
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, "bad", "no step", 4, 5, 6]
    assert _lines(tmp_path / "metrics.jsonl")[:6] == before[:6]  # kept byte for byte
    rows = [json.loads(x) for x in _lines(tmp_path / "metrics.jsonl")[6:]]
    assert [r["loss_metrics/global_avg_loss"] for r in rows] == [second[5], second[6]]
    moved = [json.loads(x) for x in _lines(tmp_path / "metrics.superseded.jsonl")]
    assert [r["step"] for r in moved] == [5, 6]
    assert [r["loss_metrics/global_avg_loss"] for r in moved] == [first[5], first[6]]
    assert all(r["resumed_from_step"] == 4 and r["superseded_at"].endswith("Z") for r in moved)
    for old, new in zip(before[6:], moved):  # the row as it was, plus the two tags
        assert {k: v for k, v in new.items() if k not in ("resumed_from_step", "superseded_at")} == json.loads(old)
    info = logs.at(logging.INFO, "resumed at step 4")
    assert len(info) == 1 and "moved 2 row(s)" in info[0] and "metrics.superseded.jsonl" in info[0]
    warnings = logs.at(logging.WARNING)
    assert len(warnings) == 1 and "2 line(s)" in warnings[0] and "line 4, 5" in warnings[0]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["metrics.jsonl", "metrics.superseded.jsonl"]

    # The relaunch crashes again after logging 5 and 6: the next resume moves those too, appended.
    _log(tmp_path, [5, 6], first, resume_at=4)
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, "bad", "no step", 4, 5, 6]
    moved = [json.loads(x) for x in _lines(tmp_path / "metrics.superseded.jsonl")]
    assert [r["step"] for r in moved] == [5, 6, 5, 6]
    assert [r["loss_metrics/global_avg_loss"] for r in moved] == [first[5], first[6], second[5], second[6]]


def test_a_rewind_moves_every_row_after_it_even_old_duplicates(tmp_path):
    losses = {s: float(s) for s in range(1, 9)}
    _log(tmp_path, range(1, 7), losses)
    _log(tmp_path, [5, 6, 7, 8], losses)  # a resume from before this fix: 5 and 6 twice
    _log(tmp_path, [3], losses, resume_at=2)  # checkpoint.load_step = 2
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3]
    assert _steps(tmp_path / "metrics.superseded.jsonl") == [3, 4, 5, 6, 5, 6, 7, 8]


def test_nothing_after_the_step_changes_nothing(tmp_path, logs):
    losses = {s: float(s) for s in range(1, 5)}
    _log(tmp_path, range(1, 5), losses)
    before = (tmp_path / "metrics.jsonl").read_bytes()
    with MetricsLogger(JobConfig(), tmp_path, rank=0) as ml:
        ml.resumed_at(4)
        ml.resumed_at(7)
        ml.log(8, _values(8.0, 8))
    after = (tmp_path / "metrics.jsonl").read_bytes()
    assert after.startswith(before) and _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 8]
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    assert logs.at(logging.INFO, "resumed") == [] and logs.at(logging.WARNING) == []


def test_a_first_resume_without_metrics_file_is_fine(tmp_path, logs):
    _log(tmp_path, [5], {5: 1.0}, resume_at=4)  # e.g. metrics.jsonl deleted by the user
    assert _steps(tmp_path / "metrics.jsonl") == [5]
    assert logs.at(logging.WARNING) == []


@pytest.mark.parametrize("fail_at", ["replace", "superseded"])
@pytest.mark.parametrize("earlier_superseded", [False, True])
def test_a_failed_rewrite_leaves_both_files_as_they_were(tmp_path, logs, monkeypatch, fail_at, earlier_superseded):
    losses = {s: float(s) for s in range(1, 7)}
    _log(tmp_path, range(1, 7), losses)
    if earlier_superseded:
        (tmp_path / "metrics.superseded.jsonl").write_text('{"step": 9, "superseded_at": "x"}\n')
    names = sorted(p.name for p in tmp_path.iterdir())
    jsonl = (tmp_path / "metrics.jsonl").read_bytes()
    superseded = {p.name: p.read_bytes() for p in tmp_path.glob("*.superseded.jsonl")}

    import trainer.metrics_superseded as ms

    if fail_at == "replace":  # the disk fails at the very last moment, after both files are written
        def broken(*args):
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(os, "replace", broken)
    else:  # half of the moved rows reached the superseded file
        def half(path, lines):
            with open(path, "ab") as f:
                f.write(lines[0][:10])
            raise OSError(28, "No space left on device")

        monkeypatch.setattr(ms, "_append_synced", half)
    with MetricsLogger(JobConfig(), tmp_path, rank=0) as ml:
        ml.resumed_at(4)
        assert (tmp_path / "metrics.jsonl").read_bytes() == jsonl  # nothing moves before a row
        ml.log(5, _values(0.5, 5))  # the move fails here; the run goes on, appending as before
        monkeypatch.undo()
        assert (tmp_path / "metrics.jsonl").read_bytes().startswith(jsonl)
        assert {p.name: p.read_bytes() for p in tmp_path.glob("*.superseded.jsonl")} == superseded
        assert sorted(p.name for p in tmp_path.iterdir()) == names  # no temp file left
        warnings = logs.at(logging.WARNING)
        assert len(warnings) == 1 and "No space left" in warnings[0] and "unchanged" in warnings[0]
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, 3, 4, 5, 6, 5]


def test_move_rows_after_raises_the_disk_error(tmp_path, monkeypatch):
    path = tmp_path / "m.jsonl"
    path.write_text('{"step": 1}\n{"step": 2}\n')

    def broken(*args):
        raise OSError(5, "Input/output error")

    monkeypatch.setattr(os, "replace", broken)
    with pytest.raises(OSError, match="Input/output"):
        move_rows_after(path, 1)
    monkeypatch.undo()
    assert path.read_text() == '{"step": 1}\n{"step": 2}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["m.jsonl"]
    result = move_rows_after(path, 1, now=lambda: "T")
    assert result.moved == 1 and result.steps == (2, 2) and result.target.name == "m.superseded.jsonl"
    assert json.loads(result.target.read_text()) == {"step": 2, "superseded_at": "T", "resumed_from_step": 1}


def test_a_torn_last_line_is_ended_before_the_next_row(tmp_path, logs):
    _log(tmp_path, [1, 2], {1: 1.0, 2: 2.0})
    with open(tmp_path / "metrics.jsonl", "a") as f:
        f.write('{"step": 3, "loss')  # killed mid-write
    _log(tmp_path, [3], {3: 3.0}, resume_at=2)
    assert _steps(tmp_path / "metrics.jsonl") == [1, 2, "bad", 3]
    assert len(logs.at(logging.WARNING, "not JSON rows")) == 1


def test_a_launch_that_logs_nothing_replaces_nothing(tmp_path):
    # Stopped before its first step (a preemption signal during start-up): the earlier rows stay.
    _log(tmp_path, range(1, 5), {s: float(s) for s in range(1, 5)})
    before = (tmp_path / "metrics.jsonl").read_bytes()
    _log(tmp_path, [], {}, resume_at=0)
    assert (tmp_path / "metrics.jsonl").read_bytes() == before
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]


def test_resumed_at_checks_its_step_and_other_ranks_do_nothing(tmp_path):
    (tmp_path / "metrics.jsonl").write_text('{"step": 5}\n')
    with MetricsLogger(JobConfig(), tmp_path, rank=1) as ml:
        ml.resumed_at(2)
        for bad in (-1, True, 2.0):
            with pytest.raises(ValueError, match="resumed_at"):
                ml.resumed_at(bad)
    assert (tmp_path / "metrics.jsonl").read_text() == '{"step": 5}\n'
    assert [p.name for p in tmp_path.iterdir()] == ["metrics.jsonl"]
    ml = MetricsLogger(JobConfig(), tmp_path, rank=0)
    ml.close()
    with pytest.raises(ValueError, match="after close"):
        ml.resumed_at(2)


def test_tensorboard_hides_the_replayed_steps_of_earlier_attempts(tmp_path):
    pytest.importorskip("tensorboard")
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    cfg = JobConfig()
    cfg.metrics.enable_tensorboard = True
    first = {s: 10.0 + s for s in range(1, 7)}
    second = {s: 20.0 + s for s in range(1, 9)}
    _log(tmp_path, range(1, 7), first, cfg)
    _log(tmp_path, [5, 6, 7, 8], second, cfg, resume_at=4)
    acc = EventAccumulator(str(tmp_path / "tb"))
    acc.Reload()
    loss = acc.Scalars("loss_metrics/global_avg_loss")
    assert [e.step for e in loss] == list(range(1, 9))
    assert [e.value for e in loss] == [first[s] for s in range(1, 5)] + [second[s] for s in range(5, 9)]
    # One event file per attempt: the resume made no empty one; the earlier file is still there.
    assert len(list((tmp_path / "tb").glob("events.out.tfevents.*"))) == 2


def test_wandb_online_resume_skips_this_attempts_steps_up_to_the_runs_last(tmp_path, logs, monkeypatch):
    wandb = pytest.importorskip("wandb")
    logged: list[int] = []
    run = types.SimpleNamespace(id="abc", starting_step=7, finish=lambda: None,
                                log=lambda values, step: logged.append(step))
    monkeypatch.setattr(wandb, "init", lambda **kwargs: run)  # the server says: last step was 6
    monkeypatch.setenv("WANDB_MODE", "online")
    cfg = JobConfig()
    cfg.metrics.enable_wandb = True
    _log(tmp_path, [5, 6, 7], {5: 1.0, 6: 1.0, 7: 1.0}, cfg, resume_at=4)
    assert logged == [7]
    warnings = logs.at(logging.WARNING, "wandb")
    assert len(warnings) == 1 and "steps 5..6 of this attempt are not sent" in warnings[0]
