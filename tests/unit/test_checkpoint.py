"""CheckpointManager on one in-process gloo rank with a small real model, optimizer and schedule.

What a user relies on: a resume restores every piece of state exactly; a partial or truncated step
folder is skipped with a warning naming it; a checkpoint of another model shape fails naming the
first mismatching key; retention never deletes the newest complete checkpoint; an async save lets
training go on and saves the state of its own step; a preemption signal saves the current step.
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import random
import signal
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np
import pytest
import torch
import torch.nn as nn

from trainer.checkpoint import CheckpointManager
from trainer.checkpoint_checksums import RecordingWriter
from trainer.checkpoint_errors import CheckpointReadError, CheckpointWriteError
from tests.helpers.one_rank import one_rank_group
from trainer.config.schema import JobConfig


@pytest.fixture(scope="module", autouse=True)
def process_group():
    with one_rank_group():
        yield


class Stream:
    """A stand-in for SampleStream's state: one integer, advanced by each batch."""

    def __init__(self) -> None:
        self.next_index = 0

    def state_dict(self) -> dict[str, int]:
        return {"next_index": self.next_index}

    def load_state_dict(self, state: dict) -> None:
        self.next_index = int(state["next_index"])


def identity(**changes) -> dict:
    """A stream identity as the Trainer records it (trainer/data/identity.py), with `changes`."""
    out = {"stream_version": 1, "dataset": "sha256:00aa00aa00aa00aa", "dataset_name": "/data/a",
           "dataset_tokens": 5000, "tokenizer": "bytes-v1", "seq_len": 16, "global_batch_size": 4,
           "seed": 0}
    out.update(changes)
    return out


def model_identity(**changes) -> dict:
    """A model identity as the Trainer records it (trainer/models/identity.py), args with `changes`."""
    args = {"dim": 16, "n_heads": 2, "n_kv_heads": 1, "rope_theta": 500000.0, "norm_eps": 1e-5,
            "attention": "sdpa"}
    args.update(changes)
    return {"family": "llama3", "flavor": "debug", "args": args}


def make_trainer(run_dir: Path, hidden: int = 16, seed: int = 0, data: dict | None = None,
                 lr: float = 1e-2, weight_decay: float = 0.1, lr_fn=None, model_args: dict | None = None,
                 **ckpt) -> SimpleNamespace:
    cfg = JobConfig()
    cfg.checkpoint.enable = True
    cfg.checkpoint.interval = 1
    for key, value in ckpt.items():
        setattr(cfg.checkpoint, key, value)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(8, hidden), nn.GELU(), nn.Linear(hidden, 4))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=weight_decay)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_fn or (lambda i: 1.0 / (1 + i)))
    return SimpleNamespace(cfg=cfg, run_dir=run_dir, model=model, optimizer=opt,
                           lr_scheduler=sched, stream=Stream(), step=0, tokens_seen=0,
                           data_identity=identity(**(data or {})),
                           model_identity=model_identity(**(model_args or {})),
                           launch_config="config.toml")


def train_step(t: SimpleNamespace) -> float:
    x = torch.randn(4, 8)  # draws from the torch RNG, so RNG restore matters for the next losses
    loss = t.model(x).square().mean()
    loss.backward()
    t.optimizer.step()
    t.optimizer.zero_grad(set_to_none=True)
    t.lr_scheduler.step()
    t.step += 1
    t.tokens_seen += 32
    t.stream.next_index += 4
    return loss.item()


def run(t: SimpleNamespace, steps: int, mgr: CheckpointManager | None = None) -> list[float]:
    losses = []
    for _ in range(steps):
        losses.append(train_step(t))
        if mgr is not None:
            mgr.maybe_save(t.step)
    return losses


def start(run_dir: Path, **kw) -> tuple[SimpleNamespace, CheckpointManager]:
    t = make_trainer(run_dir, **kw)
    mgr = CheckpointManager(t)
    mgr.load()
    return t, mgr


@contextlib.contextmanager
def captured_warnings():
    records: list[str] = []

    class Grab(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if record.levelno >= logging.WARNING:
                records.append(record.getMessage())

    log = logging.getLogger("titankit")
    handler = Grab()
    log.addHandler(handler)
    try:
        yield records
    finally:
        log.removeHandler(handler)


def steps_on_disk(run_dir: Path) -> list[str]:
    return sorted(p.name for p in (run_dir / "checkpoint").iterdir())


def test_resume_restores_everything(tmp_path):
    # Straight: 6 steps. Interrupted: 3 steps, a new process state, resume, 3 more steps.
    straight, m0 = start(tmp_path / "a", interval=100)
    ref = run(straight, 6)
    m0.close()

    t, mgr = start(tmp_path / "b", interval=3)
    first = run(t, 3, mgr)
    mgr.close()
    random.seed(123), np.random.seed(123), torch.manual_seed(123)  # a different process's RNG
    t2, mgr2 = start(tmp_path / "b", interval=3, seed=99)  # fresh (different) weights before load
    assert (t2.step, t2.tokens_seen, t2.stream.next_index) == (3, 96, 12)
    rest = run(t2, 3, mgr2)
    mgr2.close()
    assert first + rest == ref  # bitwise: model, Adam moments, lr schedule and RNG all restored
    for p, q in zip(straight.model.parameters(), t2.model.parameters()):
        assert torch.equal(p, q)


def test_resume_applies_this_configs_optimizer_settings_and_says_so(tmp_path):
    # A resume restores the Adam moments and the step; lr, weight decay and the schedule's shape are
    # the relaunch's config (lowering the lr after a spike is the usual reason to change them).
    t, mgr = start(tmp_path, interval=3)
    run(t, 3, mgr)
    mgr.close()
    moments = {k: v["exp_avg"].clone() for k, v in t.optimizer.state.items()}
    with captured_warnings() as same:
        t2, mgr2 = start(tmp_path, interval=3)
    mgr2.close()
    assert not [w for w in same if "optimizer settings" in w]  # nothing changed, nothing said
    assert t2.optimizer.param_groups[0]["lr"] == t.optimizer.param_groups[0]["lr"]  # same float

    with captured_warnings() as changed:
        t3, mgr3 = start(tmp_path, interval=3, lr=5e-3, weight_decay=0.5, lr_fn=lambda i: 3.0 / (1 + i))
    group = t3.optimizer.param_groups[0]
    assert t3.step == 3 and group["weight_decay"] == 0.5 and group["initial_lr"] == 5e-3
    assert group["lr"] == 5e-3 * 3.0 / 4  # this config's lr and schedule at step 4, not the saved 1e-2 / 4
    assert t3.lr_scheduler.get_last_lr() == [group["lr"]]
    for p, saved in zip(t3.optimizer.state.values(), moments.values()):
        assert torch.equal(p["exp_avg"], saved)  # the moments are the checkpoint's
    [msg] = [w for w in changed if "optimizer settings" in w]
    assert "apply from step 4" in msg
    assert "optimizer.lr: 0.01 in the checkpoint, 0.005 now" in msg
    assert "optimizer.weight_decay: 0.1 in the checkpoint, 0.5 now" in msg
    assert f"the lr of the next step (step 4; optimizer.lr, training.steps, lr_scheduler): 0.0025 in the checkpoint, 0.00375 now" in msg
    run(t3, 1, mgr3)
    assert t3.optimizer.param_groups[0]["lr"] == 5e-3 * 3.0 / 5  # the schedule goes on from there
    mgr3.close()


def test_rng_roundtrip(tmp_path):
    t, mgr = start(tmp_path, interval=1)
    train_step(t)
    mgr.maybe_save(t.step)
    expect = (random.random(), np.random.rand(), torch.rand(3))
    random.seed(7), np.random.seed(7), torch.manual_seed(7)
    t2, mgr2 = start(tmp_path, interval=1)
    got = (random.random(), np.random.rand(), torch.rand(3))
    assert got[0] == expect[0] and got[1] == expect[1] and torch.equal(got[2], expect[2])
    mgr.close(), mgr2.close()


def test_partial_and_truncated_folders_are_skipped(tmp_path):
    t, mgr = start(tmp_path, interval=2, keep_latest_k=2)
    run(t, 6, mgr)
    mgr.close()
    ckpt = tmp_path / "checkpoint"
    assert steps_on_disk(tmp_path) == ["step-4", "step-6"]
    (ckpt / "step-6" / ".metadata").unlink()  # as if the save of step 6 died before finishing
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 4
    assert any("step-6" in w and ".metadata" in w for w in warns), warns
    mgr2.close()

    shard = next((ckpt / "step-4").glob("*.distcp"))
    data = shard.read_bytes()
    shard.write_bytes(data[: len(data) // 2])  # a copy cut short
    (ckpt / "step-2").mkdir()  # an empty folder from a crash is not a checkpoint either
    with captured_warnings() as warns:
        t3, mgr3 = start(tmp_path, interval=2)
    # Nothing complete is left, so this is a fresh start; both skips were named.
    assert t3.step == 0
    assert any("step-4" in w and "truncated" in w for w in warns), warns
    assert any("step-2" in w for w in warns), warns
    mgr3.close()


def test_truncated_newest_falls_back_to_previous(tmp_path):
    t, mgr = start(tmp_path, interval=2, keep_latest_k=0)
    run(t, 6, mgr)
    mgr.close()
    shard = next((tmp_path / "checkpoint" / "step-6").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:-10])
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 4 and any("step-6" in w and "truncated" in w for w in warns)
    # Saving step 6 again replaces the corrupt folder instead of mixing old and new shards.
    run(t2, 2, mgr2)
    mgr2.close()
    t3, mgr3 = start(tmp_path, interval=2)
    assert t3.step == 6
    mgr3.close()


def test_a_damaged_checkpoint_of_full_length_names_the_folder_and_the_one_to_resume_instead(tmp_path):
    # Bytes changed in place (a bad copy, bit rot) keep every file's length, so the folder counts
    # as complete; DCP's failure is a BaseException, which start-up let through as a traceback.
    # With checkpoint.verify_checksums = false (or a folder saved without checksums) DCP's read is
    # what fails: test_a_flipped_byte_... has the checksums find it first.
    t, mgr = start(tmp_path, interval=2, keep_latest_k=0)
    run(t, 6, mgr)
    mgr.close()
    ckpt = tmp_path / "checkpoint"
    shard = next((ckpt / "step-6").glob("*.distcp"))
    shard.write_bytes(b"\xff" * shard.stat().st_size)
    before = folder_bytes(ckpt / "step-6")
    with pytest.raises(CheckpointReadError) as err:
        start(tmp_path, interval=2, verify_checksums=False)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {ckpt / 'step-6'} could not be read: rank 0: "), msg
    assert "damaged or unreadable" in msg and "nothing on disk was changed" in msg
    assert (f"set checkpoint.load_step = 4 (complete ones in {ckpt}: [2, 4, 6]), or move step-6 "
            f"out of {ckpt}; a relaunch then continues from step-4") in msg
    assert "\n" not in msg and "Traceback" not in msg
    assert folder_bytes(ckpt / "step-6") == before
    t2, mgr2 = start(tmp_path, interval=2, load_step=4)  # the advice works
    assert t2.step == 4
    mgr2.close()
    # Another run's checkpoint (initial_load_path) gets the advice that fits it.
    with pytest.raises(CheckpointReadError, match=r"could not be read: .*Pass another checkpoint as "
                       r"checkpoint\.initial_load_path$"):
        start(tmp_path / "other", initial_load_path=str(ckpt / "step-6"), verify_checksums=False)


def test_a_file_in_the_place_of_a_step_folder_is_kept_aside_and_the_save_goes_on(tmp_path):
    # Resumes pass over a file named step-N, but the save of step N failed on it (FileExistsError)
    # after the steps before it were trained, and again after every relaunch.
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    ckpt = tmp_path / "checkpoint"
    (ckpt / "step-4").write_text("notes")
    (ckpt / "step-6").symlink_to(tmp_path / "unmounted" / "step-6")  # a broken link
    with captured_warnings() as warns:
        run(t, 4, mgr)
    mgr.close()
    assert steps_on_disk(tmp_path) == ["step-2", "step-4", "step-4.superseded", "step-6",
                                       "step-6.superseded"]
    assert (ckpt / "step-4.superseded").read_text() == "notes"
    assert (ckpt / "step-6.superseded").is_symlink()
    assert any(f"checkpoint {ckpt / 'step-4'} renamed to step-4.superseded: it is a file, not a step "
               "folder, and this run saves step 4 there" in w for w in warns), warns
    assert any("step-6.superseded: it is a broken link" in w for w in warns), warns
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 6
    mgr2.close()


def test_a_partial_folder_of_a_later_step_is_kept_until_that_step_is_saved(tmp_path):
    # step-4 and step-6 complete, then step-6 is cut short; the relaunch resumes step-4 and saves
    # step 5. That save must not delete step-6 ("before saving the same step again" would be
    # false: this run may end before step 6).
    t, mgr = start(tmp_path, interval=2, keep_latest_k=2)
    run(t, 6, mgr)
    mgr.close()
    assert steps_on_disk(tmp_path) == ["step-4", "step-6"]
    shard = next((tmp_path / "checkpoint" / "step-6").glob("*.distcp"))
    shard.write_bytes(shard.read_bytes()[:100])
    t2, mgr2 = start(tmp_path, interval=3, keep_latest_k=2)
    assert t2.step == 4
    with captured_warnings() as warns:
        run(t2, 1, mgr2)  # step 5: no save at interval 3
        mgr2.maybe_save(t2.step, last=True)  # as the last step of a run of 5 steps saves it
    assert not any("removing" in w for w in warns), warns
    assert steps_on_disk(tmp_path) == ["step-4", "step-5", "step-6"]
    assert len(shard.read_bytes()) == 100  # left as it was
    # Saving step 6 itself replaces the partial folder, and says so.
    with captured_warnings() as warns:
        run(t2, 1, mgr2)
    assert any("removing incomplete checkpoint folder" in w and "step-6" in w for w in warns), warns
    mgr2.close()
    assert steps_on_disk(tmp_path) == ["step-5", "step-6"]
    t3, mgr3 = start(tmp_path)
    assert t3.step == 6
    mgr3.close()


def test_write_problem_names_what_stops_a_checkpoint_and_leaves_nothing_behind(tmp_path):
    from trainer.checkpoint_folders import write_problem

    (tmp_path / "file").write_text("x")
    assert write_problem(tmp_path / "file") == "it exists and is a file, not a folder"
    assert write_problem(tmp_path / "file" / "checkpoint") == \
        "it cannot be created: Not a directory"
    assert write_problem(tmp_path / "new" / "checkpoint") is None  # made, parents included
    assert list((tmp_path / "new" / "checkpoint").iterdir()) == []  # the probe file is gone


def test_a_checkpoint_folder_that_cannot_be_written_is_refused_at_start_up(tmp_path):
    (tmp_path / "checkpoint").write_text("x")
    with pytest.raises(ValueError, match=r"checkpoint.folder = 'checkpoint': checkpoints cannot be "
                       r"written into .*checkpoint: it exists and is a file, not a folder \(found "
                       r"by rank 0 on .*\)\. Make it a writable folder"):
        CheckpointManager(make_trainer(tmp_path))
    t = make_trainer(tmp_path / "fine")
    CheckpointManager(t).close()
    assert (tmp_path / "fine" / "checkpoint").is_dir()  # made at start-up, not at the first save


def test_resume_refuses_other_model_settings_that_keep_every_shape(tmp_path):
    # n_heads 2 -> 4 with n_kv_heads 1 -> 2 at one dim, or rope_theta / norm_eps: no shape changes,
    # so the shape check let such a resume through and it trained another model without a word.
    t, mgr = start(tmp_path, interval=2)
    run(t, 4, mgr)
    mgr.close()
    before = folder_bytes(tmp_path / "checkpoint" / "step-4")
    with pytest.raises(ValueError) as err:
        start(tmp_path, interval=2, model_args={"n_heads": 4, "n_kv_heads": 2, "rope_theta": 10.0})
    assert str(err.value) == (
        f"checkpoint {tmp_path / 'checkpoint' / 'step-4'} was saved by a model with other settings "
        "than this run builds:\n"
        "  model.overrides.n_heads: saved 2, current 4\n"
        "  model.overrides.n_kv_heads: saved 1, current 2\n"
        "  model.overrides.rope_theta: saved 500000.0, current 10.0\n"
        "To resume it, run with the saved values (--model.overrides.n_heads=2 "
        "--model.overrides.n_kv_heads=1 --model.overrides.rope_theta=500000.0). To train the changed "
        "model from its weights on purpose, start a new run folder (another run.name) with "
        f"checkpoint.initial_load_path = '{tmp_path / 'checkpoint' / 'step-4'}' (it loads where the "
        "weight shapes fit).")
    with pytest.raises(ValueError, match=r"model\.overrides\.norm_eps: saved 1e-05, current 0\.1\n"):
        start(tmp_path, interval=2, model_args={"norm_eps": 0.1})
    with pytest.raises(ValueError, match=r"model\.overrides\.dim: saved 16, current 32\nTo resume"):
        start(tmp_path, hidden=32, model_args={"dim": 32})  # a shape change is named the same way
    with pytest.raises(ValueError, match=r"step-2 was saved by a model .*\n  model\.overrides\.n_heads"):
        start(tmp_path, interval=2, load_step=2, model_args={"n_heads": 4})  # a rewind is a resume too
    assert folder_bytes(tmp_path / "checkpoint" / "step-4") == before  # nothing was touched
    # Another attention backend computes the same function: the resume goes on.
    t2, mgr2 = start(tmp_path, interval=2, model_args={"attention": "triton"})
    assert t2.step == 4
    mgr2.close()


def test_initial_load_of_another_runs_checkpoint_is_not_refused_for_other_model_settings(tmp_path,
                                                                                         caplog):
    src, mgr = start(tmp_path / "src", interval=2)
    run(src, 2, mgr)
    mgr.close()
    folder = str(tmp_path / "src" / "checkpoint")
    with caplog.at_level(logging.INFO, logger="titankit"):
        t, m = start(tmp_path / "ft", initial_load_path=folder, model_args={"rope_theta": 10.0})
    assert t.step == 0
    m.close()
    assert any("was saved with other model settings (model.overrides.rope_theta: saved 500000.0, "
               "current 10.0); its weights load where their shapes fit" in r.getMessage()
               for r in caplog.records)
    t, m = start(tmp_path / "ft2", initial_load_path=folder, initial_load_model_only=False,
                 model_args={"n_heads": 4, "n_kv_heads": 2})
    assert t.step == 2
    m.close()


def _save_as_older_titankit(tmp_path, monkeypatch, section: str, record: str) -> None:
    """Two steps checkpointed as a titankit from before `record` would have: state[section] without it."""
    real = CheckpointManager._state_dict

    def older(self, step):
        state = real(self, step)
        del state[section][record]
        return state

    monkeypatch.setattr(CheckpointManager, "_state_dict", older)
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    monkeypatch.undo()


def test_a_checkpoint_without_model_settings_resumes_with_one_info_line(tmp_path, monkeypatch, caplog):
    # Saved by a titankit before the record: only the shape check applies.
    _save_as_older_titankit(tmp_path, monkeypatch, "train", "model_identity")
    with caplog.at_level(logging.INFO, logger="titankit"):
        t2, mgr2 = start(tmp_path, interval=2, model_args={"rope_theta": 10.0})
    assert t2.step == 2
    mgr2.close()
    notes = [r.getMessage() for r in caplog.records if "model settings" in r.getMessage()]
    assert notes == [f"checkpoint {tmp_path / 'checkpoint' / 'step-2'} records no model settings "
                     "(saved by an older titankit): only the shapes of its weights are checked"]


def test_other_model_shape_names_first_mismatching_key(tmp_path):
    t, mgr = start(tmp_path, interval=1)
    run(t, 1, mgr)
    mgr.close()
    t2 = make_trainer(tmp_path, hidden=32)
    with pytest.raises(ValueError, match=r"'0\.weight' has shape \(16, 8\) in the checkpoint but "
                                         r"\(32, 8\) in the model"):
        CheckpointManager(t2).load()


def with_model(t: SimpleNamespace, model: nn.Module) -> SimpleNamespace:
    t.model = model
    t.optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    t.lr_scheduler = torch.optim.lr_scheduler.LambdaLR(t.optimizer, lambda i: 1.0)
    return t


def test_other_layer_count_names_missing_or_extra_key(tmp_path):
    # A resume with more or fewer layers than the run that saved (model.overrides.n_layers changed):
    # the error names a key and the config keys to compare, before any tensor is read.
    t, mgr = start(tmp_path, interval=1)
    run(t, 1, mgr)
    mgr.close()
    base = make_trainer(tmp_path)
    deeper = with_model(base, nn.Sequential(*base.model, nn.Linear(4, 4)))
    with pytest.raises(ValueError, match=r"key '3\.weight' of the model \(shape \(4, 4\)\) is not in the "
                                         r"checkpoint; .*check model\.flavor and model\.overrides"):
        CheckpointManager(deeper).load()
    shallower = with_model(make_trainer(tmp_path), nn.Sequential(nn.Linear(8, 16)))
    with pytest.raises(ValueError, match=r"key '2\.weight' \(shape \(4, 16\)\) is in the checkpoint but "
                                         r"not in the model \(2 such keys\)"):
        CheckpointManager(shallower).load()


def test_retention_keeps_latest_k(tmp_path):
    (tmp_path / "checkpoint" / "step-1").mkdir(parents=True)  # leftover of a crashed save
    t, mgr = start(tmp_path, interval=1, keep_latest_k=2)
    run(t, 5, mgr)
    mgr.close()
    assert steps_on_disk(tmp_path) == ["step-4", "step-5"]
    t2, mgr2 = start(tmp_path / "all", interval=2, keep_latest_k=0)
    run(t2, 6, mgr2)
    mgr2.close()
    assert sorted(p.name for p in (tmp_path / "all" / "checkpoint").iterdir()) == \
        ["step-2", "step-4", "step-6"]


class Crash(BaseException):
    """The process dying (kill -9, a node failure): nothing after it runs, no handler catches it."""


def test_a_deletion_cut_short_by_a_crash_leaves_nothing_that_looks_like_a_checkpoint(tmp_path,
                                                                                     monkeypatch):
    """Was: retention's rmtree of step-1 cut short after it removed .checksums/ left step-1 with its
    .metadata and shards: complete to a resume, and loaded without its bytes verified."""
    import shutil

    from trainer.checkpoint_folders import complete_step_folders, list_step_folders

    root = tmp_path / "checkpoint"
    t, mgr = start(tmp_path, interval=1, keep_latest_k=2)
    run(t, 2, mgr)
    rmtree = shutil.rmtree

    def dies_midway(path, *args, **kwargs):
        rmtree(Path(path) / ".checksums")  # rmtree goes in directory order: these went first
        raise Crash()

    monkeypatch.setattr(shutil, "rmtree", dies_midway)
    try:
        with pytest.raises(Crash):
            run(t, 1, mgr)  # step-3 is saved, then retention's deletion of step-1 dies midway
    finally:
        monkeypatch.undo()
        mgr.close()
    assert [s for s, _ in list_step_folders(root)] == [2, 3]
    assert [s for s, _ in complete_step_folders(root)] == [2, 3]
    assert (root / ".step-1.deleting").is_dir()  # what is left is hidden, out of the step-N names
    # A relaunch resumes the newest, and its first save's retention removes the leftover.
    t2, mgr2 = start(tmp_path, interval=1, keep_latest_k=2)
    assert t2.step == 3
    run(t2, 1, mgr2)
    mgr2.close()
    assert steps_on_disk(tmp_path) == ["step-3", "step-4"]


def test_load_step_and_rewind(tmp_path):
    t, mgr = start(tmp_path, interval=2, keep_latest_k=0)
    run(t, 6, mgr)
    mgr.close()
    with pytest.raises(ValueError, match=r"load_step = 5.*complete ones.*\[2, 4, 6\]"):
        start(tmp_path, interval=2, load_step=5)
    t2, mgr2 = start(tmp_path, interval=2, keep_latest_k=0, load_step=2)
    assert t2.step == 2
    run(t2, 2, mgr2)  # saves step 4 again: the old step-4 and step-6 are set aside, not deleted
    mgr2.close()
    assert steps_on_disk(tmp_path) == ["load_step.json", "step-2", "step-4", "step-4.superseded",
                                       "step-6.superseded"]
    t3, mgr3 = start(tmp_path, interval=2)
    assert t3.step == 4
    mgr3.close()


def test_initial_load_path(tmp_path):
    src, mgr = start(tmp_path / "src", interval=3)
    run(src, 3, mgr)
    mgr.close()
    # Model only (the default): weights from the folder of step folders, the rest fresh.
    t, m = start(tmp_path / "dst", initial_load_path=str(tmp_path / "src" / "checkpoint"))
    assert t.step == 0 and t.stream.next_index == 0 and len(t.optimizer.state) == 0
    for p, q in zip(src.model.parameters(), t.model.parameters()):
        assert torch.equal(p, q)
    m.close()
    # Everything, from an explicit step folder.
    t, m = start(tmp_path / "dst2", initial_load_path=str(tmp_path / "src" / "checkpoint" / "step-3"),
                 initial_load_model_only=False)
    assert (t.step, t.stream.next_index) == (3, 12)
    m.close()
    with pytest.raises(ValueError, match="initial_load_path.*no such folder"):
        start(tmp_path / "dst3", initial_load_path=str(tmp_path / "nope"))
    # A file of the checkpoint (its .metadata) is not "no such folder": the error names the folder.
    step3 = tmp_path / "src" / "checkpoint" / "step-3"
    with pytest.raises(ValueError, match=rf"initial_load_path = '{step3 / '.metadata'}' is a file, not "
                       rf"a folder: it lies in the checkpoint {step3}; pass that folder$"):
        start(tmp_path / "dst4", initial_load_path=str(step3 / ".metadata"))
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(ValueError, match=r"initial_load_path = '.*notes\.txt' is a file, not a folder; "
                       r"pass a step folder"):
        start(tmp_path / "dst5", initial_load_path=str(tmp_path / "notes.txt"))


class SlowWriter(RecordingWriter):
    """Writes like the run's writer (DCP's, recording checksums), one second later (a slow shared
    filesystem)."""

    def write_data(self, plan, planner):
        time.sleep(1.0)
        return super().write_data(plan, planner)


def test_async_save_overlaps_training_and_saves_its_step(tmp_path):
    t, mgr = start(tmp_path, interval=2, async_mode="async")
    mgr.writer_factory = SlowWriter
    run(t, 2, mgr)  # step 2 is saved in the background
    snapshot = {k: v.clone() for k, v in t.model.state_dict().items()}
    exp_avg = [t.optimizer.state[p]["exp_avg"].clone() for p in t.model.parameters()]
    t0 = time.perf_counter()
    run(t, 1, mgr)  # step 3 trains while the write of step 2 is in flight
    assert time.perf_counter() - t0 < 0.8
    assert mgr._pending is not None and not mgr._pending.future.done()
    assert not (tmp_path / "checkpoint" / "step-2" / ".metadata").exists()
    assert not torch.equal(snapshot["0.weight"], t.model.state_dict()["0.weight"])
    mgr.close()  # waits for the write
    t2, mgr2 = start(tmp_path, interval=2, load_step=2)
    assert t2.step == 2
    for k, v in t2.model.state_dict().items():
        assert torch.equal(v, snapshot[k]), k
    for p, ref in zip(t2.model.parameters(), exp_avg):
        assert torch.equal(t2.optimizer.state[p]["exp_avg"], ref)
    mgr2.close()


def test_async_saves_reuse_staging_memory_and_save_their_own_steps(tmp_path):
    t, mgr = start(tmp_path, interval=2, async_mode="async", keep_latest_k=0)
    mgr.writer_factory = SlowWriter  # the write of step 2 is still reading when step 4 is staged
    stager = mgr._async_stager()
    assert stager is not None  # torch >= 2.9 has DefaultStager; the fallback would copy afresh
    staged: list[dict] = []
    real_stage = stager.stage

    def recording_stage(state_dict, **kw):  # the real staging, with its result kept for the test
        out = real_stage(state_dict, **kw)
        staged.append(out)
        return out

    stager.stage = recording_stage
    snapshots = {}
    for _ in range(2):
        run(t, 2, mgr)  # saves step 2, then step 4 (which first waits for the write of step 2)
        snapshots[t.step] = ({k: v.clone() for k, v in t.model.state_dict().items()},
                             [t.optimizer.state[p]["exp_avg"].clone() for p in t.model.parameters()])
    run(t, 1, mgr)  # step 5 changes the weights while step 4 is being written
    mgr.close()
    assert len(staged) == 2
    first, second = staged
    for key in ("0.weight", "2.bias"):
        a, b = first["model"][key], second["model"][key]
        assert a.data_ptr() == b.data_ptr(), key  # the same host buffer, not a fresh copy
        assert a.data_ptr() != t.model.state_dict()[key].data_ptr(), key  # a copy, not the live one
    opt_a = [v for v in first["optimizer"]["state"].values()]
    opt_b = [v for v in second["optimizer"]["state"].values()]
    assert [s["exp_avg"].data_ptr() for s in opt_a] == [s["exp_avg"].data_ptr() for s in opt_b]
    # Each folder holds its own step's state although the buffers were reused in between.
    for step, (weights, exp_avg) in snapshots.items():
        t2, mgr2 = start(tmp_path, interval=2, load_step=step)
        assert t2.step == step
        for k, v in t2.model.state_dict().items():
            assert torch.equal(v, weights[k]), (step, k)
        for p, ref in zip(t2.model.parameters(), exp_avg):
            assert torch.equal(t2.optimizer.state[p]["exp_avg"], ref), step
        mgr2.close()
    assert not torch.equal(snapshots[2][0]["0.weight"], snapshots[4][0]["0.weight"])


def test_preemption_signal_saves_current_step(tmp_path):
    before = signal.getsignal(signal.SIGUSR1)
    t, mgr = start(tmp_path, interval=100)
    run(t, 3, mgr)
    assert not mgr.preempted()
    os.kill(os.getpid(), signal.SIGUSR1)
    assert mgr.preempted()
    mgr.close()
    assert steps_on_disk(tmp_path) == ["step-3"]
    # close() puts back the handler that was there before.
    assert signal.getsignal(signal.SIGUSR1) == before


class TokenArray:
    """A token source in memory (the interface SampleStream reads: len, gather, eos_id)."""

    def __init__(self, n: int) -> None:
        self.tokens = np.random.default_rng(0).integers(0, 250, n).astype(np.int64)
        self.eos_id = 255

    def __len__(self) -> int:
        return len(self.tokens)

    def gather(self, starts: np.ndarray, length: int) -> np.ndarray:
        return np.stack([self.tokens[s:s + length] for s in starts])


@pytest.mark.parametrize("new_dp", [1, 4])
def test_stream_continues_on_another_dp_degree(tmp_path, new_dp):
    from trainer.data.stream import SampleStream

    source = TokenArray(5000)
    seen: list[int] = []
    # 2 DP ranks, 3 batches of 2 samples each, then a checkpoint (the state is shared by all ranks).
    streams = [SampleStream(source, 16, 0, r, 2, 2) for r in range(2)]
    for _ in range(3):
        for s in streams:
            seen += s.next_batch()["indices"].tolist()
    t, mgr = start(tmp_path, interval=1)
    t.stream = streams[0]
    mgr.save(3)
    mgr.close()
    # Resumed on new_dp ranks: each rank's stream loads the same state and takes its share.
    for r in range(new_dp):
        t2 = make_trainer(tmp_path)
        t2.stream = SampleStream(source, 16, 0, r, new_dp, 2)
        m2 = CheckpointManager(t2)
        m2.load()
        m2.close()
        for _ in range(24 // (2 * new_dp)):
            seen += t2.stream.next_batch()["indices"].tolist()
    # Samples 0..35: each exactly once, none skipped.
    assert sorted(seen) == list(range(36))


# ---- the data stream a checkpoint continues ---------------------------------------------------

def folder_bytes(folder: Path) -> dict[str, bytes]:
    return {str(p.relative_to(folder)): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("key, config_key, changed, shown", [
    ("dataset", "data.dataset", {"dataset": "sha256:11bb11bb11bb11bb", "dataset_name": "/data/b",
                                 "dataset_tokens": 7000},
     "saved 'sha256:00aa00aa00aa00aa' (/data/a, 5,000 tokens), current 'sha256:11bb11bb11bb11bb' "
     "(/data/b, 7,000 tokens)"),
    ("tokenizer", "data.tokenizer", {"tokenizer": "sha256:feedfeedfeedfeed"},
     "saved 'bytes-v1', current 'sha256:feedfeedfeedfeed'"),
    ("seq_len", "training.seq_len", {"seq_len": 32}, "saved 16, current 32"),
    ("global_batch_size", "training.global_batch_size", {"global_batch_size": 2}, "saved 4, current 2"),
    ("seed", "run.seed", {"seed": 7}, "saved 0, current 7"),
], ids=["dataset", "tokenizer", "seq_len", "global_batch_size", "seed"])
def test_resume_refuses_another_data_stream(tmp_path, key, config_key, changed, shown):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    before = folder_bytes(tmp_path / "checkpoint")
    t2 = make_trainer(tmp_path, interval=2, data=changed)
    with pytest.raises(ValueError) as err:
        CheckpointManager(t2).load()
    msg = str(err.value)
    assert str(tmp_path / "checkpoint" / "step-2") in msg
    assert f"{config_key} ({key}): {shown}" in msg, msg
    assert "checkpoint.allow_data_change = true" in msg and "saved values" in msg
    assert t2.step == 0 and t2.stream.next_index == 0  # nothing was applied
    assert folder_bytes(tmp_path / "checkpoint") == before  # nor changed on disk


def test_refusal_names_every_difference_and_the_flags_that_restore_them(tmp_path):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    t2 = make_trainer(tmp_path, interval=2, data={"seq_len": 32, "seed": 3, "global_batch_size": 2})
    assert t2.cfg.training.global_batch_size == -1
    with pytest.raises(ValueError) as err:
        CheckpointManager(t2).load()
    msg = str(err.value)
    for line in ("training.seq_len (seq_len): saved 16, current 32",
                 "training.global_batch_size (global_batch_size): saved 4, current 2",
                 "run.seed (seed): saved 0, current 3"):
        assert line in msg, msg
    assert "--training.seq_len=16 --training.global_batch_size=4 --run.seed=0" in msg
    # The default -1 follows the number of ranks: the message says so and what to do.
    assert "-1 means local_batch_size x data-parallel degree" in msg


def test_the_refusal_hint_restores_the_saved_dataset_and_tokenizer():
    """It said only 'run with the saved values' for these, showing fingerprints."""
    from trainer.data import identity as stream_id

    saved = {"dataset": "sha256:00aa", "tokenizer": "sha256:feed", "seq_len": 16,
             "dataset_spec": "/data/my shards", "tokenizer_spec": "/tok/tokenizer.json"}
    assert stream_id.resume_hint(saved, ["dataset", "tokenizer", "seq_len"]) == (
        "--data.dataset='/data/my shards' --data.tokenizer=/tok/tokenizer.json --training.seq_len=16")
    # A checkpoint from before the specs were recorded: the byte tokenizer is known by its fingerprint.
    assert stream_id.resume_hint({"dataset": "sha256:00aa", "tokenizer": "bytes-v1"},
                                 ["dataset", "tokenizer"]) == "--data.tokenizer=bytes"


def test_allow_data_change_resumes_warns_and_records_the_new_stream(tmp_path):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=2, allow_data_change=True, data={"global_batch_size": 8})
    assert (t2.step, t2.stream.next_index) == (2, 8)  # the saved position, kept
    assert any("allow_data_change" in w and "training.global_batch_size (global_batch_size): saved 4, "
               "current 8" in w and "global sample 8" in w for w in warns), warns
    run(t2, 2, mgr2)  # saves step-4 with the new identity
    mgr2.close()
    # The next resume compares with the new settings: no opt-in needed, no warning.
    with captured_warnings() as warns:
        t3, mgr3 = start(tmp_path, interval=2, data={"global_batch_size": 8})
    assert t3.step == 4 and not warns, warns
    mgr3.close()
    with pytest.raises(ValueError, match=r"saved 8, current 4"):
        start(tmp_path, interval=2)


def test_checkpoint_without_identity_loads_with_one_warning(tmp_path, monkeypatch):
    # A checkpoint as titankit wrote it before it recorded the stream: data = {"next_index"} only.
    _save_as_older_titankit(tmp_path, monkeypatch, "data", "identity")
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=2, data={"seq_len": 64})  # cannot be checked
    assert (t2.step, t2.stream.next_index) == (2, 8)
    assert [w for w in warns if "no data-stream identity" in w] == [w for w in warns], warns
    assert len(warns) == 1 and "\n" not in warns[0] and "training.seq_len" in warns[0]
    mgr2.close()


def test_weights_only_initial_load_starts_a_new_stream_unchecked(tmp_path):
    src, mgr = start(tmp_path / "src", interval=2)
    run(src, 2, mgr)
    mgr.close()
    folder = str(tmp_path / "src" / "checkpoint")
    t, m = start(tmp_path / "dst", initial_load_path=folder, data={"seq_len": 64, "seed": 5})
    assert t.step == 0 and t.stream.next_index == 0
    m.close()
    # Loading its data position too continues its stream: checked like a resume.
    with pytest.raises(ValueError, match=r"training\.seq_len \(seq_len\): saved 16, current 64"):
        start(tmp_path / "dst2", initial_load_path=folder, initial_load_model_only=False,
              data={"seq_len": 64})


def test_ranks_reading_different_data_fail_together(tmp_path, monkeypatch):
    # Two ranks, one of which sees other shards (e.g. a node with a stale copy): every rank gets
    # the same error naming the rank, instead of training on different streams.
    import trainer.checkpoint as ckpt

    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.close()
    t2 = make_trainer(tmp_path, interval=2)
    m2 = CheckpointManager(t2)
    m2.world_size = 2

    def gather(out, obj, group=None):
        out[0], out[1] = obj, identity(dataset="sha256:22cc22cc22cc22cc")

    monkeypatch.setattr(ckpt.dist, "all_gather_object", gather)
    with pytest.raises(ValueError, match=r"ranks read different data streams \(data\.dataset \(dataset\): "
                                         r"rank 0 'sha256:00aa00aa00aa00aa' .*, rank 1 'sha256:22cc"):
        m2._agreed_identity()


def test_async_save_without_enough_host_memory_saves_blocking(tmp_path, monkeypatch):
    """A node that cannot hold the staging copy would be OOM-killed mid-write: such a run saves
    blocking instead, says why, and its checkpoints are complete and resumable."""
    import trainer.checkpoint as ckpt

    monkeypatch.setattr(ckpt, "mem_available", lambda: 10**6)  # 1 MB available
    t, mgr = start(tmp_path, interval=2, async_mode="async")
    with captured_warnings() as warnings:
        run(t, 2, mgr)
    assert mgr._pending is None and not mgr.async_mode
    assert (tmp_path / "checkpoint" / "step-2" / ".metadata").exists()
    assert any("host staging" in w and "blocking saves instead" in w and "0.0 GB available" in w
               for w in warnings), warnings
    weights = {k: v.clone() for k, v in t.model.state_dict().items()}
    run(t, 2, mgr)  # later saves are blocking too, without asking again
    assert mgr._pending is None and (tmp_path / "checkpoint" / "step-4" / ".metadata").exists()
    mgr.close()
    t2, mgr2 = start(tmp_path, interval=2, load_step=2)
    assert t2.step == 2 and all(torch.equal(v, weights[k]) for k, v in t2.model.state_dict().items())
    mgr2.close()


def test_a_stager_that_cannot_stage_twice_falls_back_to_fresh_copies(monkeypatch):
    """torch 2.11's DefaultStager emptied itself after each stage, so a reused one failed at the second
    checkpoint. The reuse is probed once; a stager that fails the probe is not used, and the reason
    is said, instead of a run that dies at its second async save."""
    import torch.distributed.checkpoint.staging as staging

    from trainer.checkpoint import make_async_stager

    class EmptiesItself(staging.DefaultStager):  # a torch whose staging internals the fix does not know
        def stage(self, state_dict, **kw):
            out = super().stage(state_dict, **kw)
            self._state_dict_stager._deepcopy_dispatch.clear()  # what torch 2.11's close() did
            return out

    monkeypatch.setattr(staging, "DefaultStager", EmptiesItself)
    stager, what = make_async_stager(False)
    assert stager is None
    assert "cannot stage twice (KeyError" in what and "fresh, unpinned CPU memory" in what


def writer_pid(timeout: float = 60.0) -> int:
    """The pid of DCP's writer process (one per training process, started by the first save).
    DCP starts it from the save's background thread and publishes it only once the new interpreter
    has imported torch (seconds on a loaded 2-core machine), so it is waited for."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    deadline = time.monotonic() + timeout
    while executor._CHECKPOINT_PROCESS is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert executor._CHECKPOINT_PROCESS is not None, f"no writer process was started in {timeout} s"
    return executor._CHECKPOINT_PROCESS._save_process.pid


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return False
    return "State:\tZ" not in state


def blocks(pid: int, sig: int) -> bool:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("SigBlk:"):
            return bool(int(line.split()[1], 16) >> (sig - 1) & 1)
    raise AssertionError(f"no SigBlk line for {pid}")


linux_only = pytest.mark.skipif(not Path("/proc/self/task").exists(), reason="reads /proc")


@linux_only
def test_writer_process_writes_resumable_checkpoints_and_survives_sigusr1(tmp_path):
    t, mgr = start(tmp_path, interval=2, async_mode="async", async_writer="process")
    run(t, 2, mgr)  # step 2 goes to the writer process
    assert mgr.writer == "process" and mgr._pending is not None
    # The mask that the writer inherited is not left on the training thread.
    assert signal.SIGUSR1 not in signal.pthread_sigmask(signal.SIG_BLOCK, [])
    mgr._wait()
    pid = writer_pid()
    # The preemption signal, sent to every process of a job step, must not end a write midway.
    assert blocks(pid, signal.SIGUSR1)
    os.kill(pid, signal.SIGUSR1)
    run(t, 2, mgr)  # step 4 goes to the same writer process, which is still there
    weights = {k: v.clone() for k, v in t.model.state_dict().items()}
    mgr.close()
    assert writer_pid() == pid and alive(pid)
    assert steps_on_disk(tmp_path) == ["step-2", "step-4"]
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 4 and all(torch.equal(v, weights[k]) for k, v in t2.model.state_dict().items())
    mgr2.close()


def test_writer_process_without_room_in_shared_memory_writes_from_a_thread(tmp_path, monkeypatch):
    import trainer.checkpoint as ckpt

    monkeypatch.setattr(ckpt, "shm_free", lambda: 10**3)  # 1 kB of /dev/shm
    t, mgr = start(tmp_path, interval=2, async_mode="async", async_writer="process")
    with captured_warnings() as warnings:
        run(t, 2, mgr)
    assert mgr.async_mode and mgr.writer == "thread" and mgr._pending is not None
    assert any("async_writer = 'process'" in w and "/dev/shm" in w and "by a thread" in w
               for w in warnings), warnings
    mgr.close()
    assert (tmp_path / "checkpoint" / "step-2" / ".metadata").exists()


@linux_only
def test_preemption_saves_its_step_when_the_writer_process_was_killed(tmp_path):
    """Launchers that signal a whole process group (torchrun on SIGTERM, Slurm) end the writer
    process too; the write it left half done must not stop the save of the preempted step."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    t, mgr = start(tmp_path, interval=2, async_mode="async", async_writer="process")
    mgr.writer_factory = SlowWriter
    try:
        run(t, 2, mgr)  # step 2: the writer process sleeps a second in write_data
        assert mgr._pending is not None and not mgr._pending.future.done()
        os.kill(writer_pid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)
        with captured_warnings() as logged:
            assert mgr.preempted()  # waits for the failed write, then saves step 2 itself, blocking
        mgr.close()
        assert any("step-2 could not be written" in m and "a relaunch skips it" in m for m in logged), logged
    finally:
        # DCP keeps one writer process per training process; later tests need a live one.
        executor._CHECKPOINT_PROCESS = None
    assert steps_on_disk(tmp_path) == ["step-2"]
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2
    mgr2.close()


def test_a_write_the_signal_ended_does_not_stop_the_next_steps_preemption_save(tmp_path):
    """The audit's case: the signal ended the writer process, the trainer's next call after the
    step met the failed write before any preemption check, and the run died with nothing saved.
    after_step checks for preemption first, so the step is saved and the run stops cleanly."""
    from torch.distributed.checkpoint import _async_process_executor as executor

    t, mgr = start(tmp_path, interval=2, async_mode="async", async_writer="process")
    mgr.writer_factory = SlowWriter
    try:
        for _ in range(2):
            train_step(t)
            assert not mgr.after_step(t.step)  # step 2: written in the background, slowly
        deadline = time.monotonic() + 30
        while executor._CHECKPOINT_PROCESS is None and time.monotonic() < deadline:
            time.sleep(0.05)  # DCP starts its writer process from a thread of its own
        os.kill(writer_pid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGUSR1)
        deadline = time.monotonic() + 30
        while not mgr._pending.future.done() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert mgr._pending.future.done()  # failed: the next maybe_save alone would raise on it
        train_step(t)
        with captured_warnings() as logged:
            assert mgr.after_step(t.step)
        mgr.close()
        assert any("step-2 could not be written" in m for m in logged), logged
    finally:
        executor._CHECKPOINT_PROCESS = None  # DCP keeps one per process; later tests need a live one
    assert steps_on_disk(tmp_path) == ["step-3"]  # the incomplete step-2 is gone, step-3 complete
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 3
    mgr2.close()


class FullDiskWriter(RecordingWriter):
    """A filesystem that runs out of space during the write."""

    def write_data(self, plan, planner):
        raise OSError(errno.ENOSPC, "No space left on device")


def test_a_full_disk_says_so_and_names_the_checkpoint_a_relaunch_uses(tmp_path):
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)  # step-2 complete
    mgr.writer_factory = FullDiskWriter
    with pytest.raises(CheckpointWriteError) as err:
        run(t, 2, mgr)
    msg = str(err.value)
    assert f"checkpoint {tmp_path / 'checkpoint' / 'step-4'} could not be written (no space left" in msg
    assert "GB free on" in msg and "newest complete checkpoint is step-2" in msg
    assert "): rank 0: OSError: [Errno 28] No space left on device. The folder" in msg
    assert "\n" not in msg and "Traceback" not in msg
    mgr.close()
    t2, mgr2 = start(tmp_path, interval=2)
    assert t2.step == 2
    mgr2.close()


def test_an_async_write_failure_raised_as_dcps_base_exception_is_reported():
    """DCP raises CheckpointException, a BaseException: `except Exception` alone let it through."""
    from concurrent.futures import Future
    from torch.distributed.checkpoint.api import CheckpointException

    from trainer.checkpoint import _Pending

    future: Future = Future()
    future.set_exception(CheckpointException("write failed", {0: (OSError(errno.ENOSPC, "full"), None)}))
    mgr = CheckpointManager.__new__(CheckpointManager)
    mgr.root = Path("/nonexistent-titankit-root")
    mgr._pending = _Pending(6, Path("/x/checkpoint/step-6"), future, time.perf_counter(), 0.1)
    with pytest.raises(CheckpointWriteError, match=r"async save: checkpoint /x/checkpoint/step-6 could "
                       r"not be written \(no space left on the device; free space on "
                       r"/nonexistent-titankit-root unknown\): rank 0: OSError: \[Errno 28\] full\."):
        mgr._wait()


class ShortWriteWriter(RecordingWriter):
    """torch.save's zip writer on a full device: the ENOSPC is lost, only the short write shows."""

    def write_data(self, plan, planner):
        raise RuntimeError("[enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598\n"
                           "frame #0: c10::ThrowEnforceNotMet(...)")


def test_a_full_device_is_named_even_when_the_exception_does_not_say_so(tmp_path, monkeypatch):
    import shutil

    import trainer.checkpoint_errors as errors

    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)
    mgr.writer_factory = ShortWriteWriter
    disk = shutil.disk_usage(tmp_path)
    monkeypatch.setattr(errors.shutil, "disk_usage", lambda p: disk._replace(free=0))
    with pytest.raises(CheckpointWriteError) as err:
        run(t, 2, mgr)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint {tmp_path / 'checkpoint' / 'step-4'} could not be written (no "
                          "space left on the device, most likely: less free than the ")
    assert ("this rank writes; 0 kB free on" in msg and "): rank 0: RuntimeError: [enforce fail at "
            "inline_container.cc:672] . unexpected pos 704 vs 598. The folder stays incomplete" in msg)
    assert "newest complete checkpoint is step-2" in msg and "continues from step-2" in msg
    assert "\n" not in msg and "frame #0" not in msg  # one line: no DCP traceback, no C++ frames
    mgr.close()
    # With room on the device the same failure is not blamed on the space.
    monkeypatch.setattr(errors.shutil, "disk_usage", lambda p: disk._replace(free=10**12))
    t2, mgr2 = start(tmp_path, interval=2)
    mgr2.writer_factory = ShortWriteWriter
    with pytest.raises(CheckpointWriteError, match=r"could not be written \(1000\.0 GB free on .*\): "
                       r"rank 0: RuntimeError: .*Relaunch once the cause is fixed: it continues from "
                       r"step-2"):
        run(t2, 2, mgr2)
    mgr2.close()


class MetadataThenFailWriter(RecordingWriter):
    """A save that fails after DCP put .metadata in place, as when a peer dies during DCP's final
    broadcast of the result: the folder on disk is complete."""

    def finish(self, metadata, results):
        super().finish(metadata, results)
        raise RuntimeError("Connection closed by peer")


def test_a_failure_after_metadata_says_the_folder_is_complete_and_a_relaunch_uses_it(tmp_path):
    """Was: "The folder stays incomplete and a relaunch skips it; the newest complete checkpoint is
    step-4", naming as complete the very folder it called incomplete."""
    t, mgr = start(tmp_path, interval=2)
    run(t, 2, mgr)  # step-2 complete
    mgr.writer_factory = MetadataThenFailWriter
    with pytest.raises(CheckpointWriteError) as err:
        run(t, 2, mgr)
    msg = str(err.value)
    assert f"checkpoint {tmp_path / 'checkpoint' / 'step-4'} could not be written" in msg
    assert "RuntimeError: Connection closed by peer" in msg and "\n" not in msg
    assert "stays incomplete" not in msg and "skips it" not in msg
    assert ("Its .metadata and every shard it names were written before the failure, so the folder "
            "counts as complete; the newest complete checkpoint is step-4. Relaunch once the cause is "
            "fixed: it continues from step-4") in msg
    mgr.close()
    t2, mgr2 = start(tmp_path, interval=2)  # what the message promised
    assert t2.step == 4
    mgr2.close()


# ---- checkpoint.load_step applies once per checkpoint folder; a complete run says so ------------

def folders(run_dir: Path) -> list[str]:
    """steps_on_disk without the rewind record (load_step.json), which has its own checks."""
    return [n for n in steps_on_disk(run_dir) if n != "load_step.json"]


def rewound_run(tmp_path: Path) -> None:
    """A run folder holding step-4 and step-8 (keep_latest_k = 2), as the audit's case starts."""
    t, mgr = start(tmp_path, interval=4, keep_latest_k=2)
    run(t, 8, mgr)
    mgr.close()
    assert steps_on_disk(tmp_path) == ["step-4", "step-8"]


def test_relaunching_a_rewind_continues_from_the_newest_and_says_why(tmp_path):
    rewound_run(tmp_path)
    # --training.steps=16 --checkpoint.load_step=4: rewinds, saves 8, 12, 16; retention drops step-4.
    t, mgr = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    assert t.step == 4
    run(t, 12, mgr)
    mgr.close()
    assert folders(tmp_path) == ["step-12", "step-16", "step-8.superseded"]
    weights = {k: v.clone() for k, v in t.model.state_dict().items()}
    # The same command again (a requeue): it used to fail because step-4 is gone.
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    assert t2.step == 16
    assert (tmp_path / "checkpoint" / "load_step.json").is_file()
    assert all(torch.equal(v, weights[k]) for k, v in t2.model.state_dict().items())
    why = [w for w in warns if "load_step = 4 is not applied again" in w]
    assert len(why) == 1, warns
    assert "from step-8" in why[0] and "step-16" in why[0] and "load_step.json" in why[0]
    mgr2.close()
    assert folders(tmp_path) == ["step-12", "step-16", "step-8.superseded"]
    # A load_step that never existed still fails clearly.
    with pytest.raises(ValueError, match=r"load_step = 5.*not a complete checkpoint.*\[12, 16\]"):
        start(tmp_path, interval=4, load_step=5)


def test_a_different_load_step_still_rewinds(tmp_path):
    rewound_run(tmp_path)
    t, mgr = start(tmp_path, interval=4, keep_latest_k=0, load_step=4)
    run(t, 8, mgr)  # saves 8 and 12 of the new continuation
    mgr.close()
    t2, mgr2 = start(tmp_path, interval=4, keep_latest_k=0, load_step=8)
    assert t2.step == 8
    run(t2, 4, mgr2)  # saves 12 again: the first one is set aside
    mgr2.close()
    assert folders(tmp_path) == ["step-12", "step-12.superseded", "step-4", "step-8",
                                 "step-8.superseded"]
    t3, mgr3 = start(tmp_path, interval=4, load_step=8)  # relaunched: continues, no rewind
    assert t3.step == 12
    mgr3.close()
    import json

    record = json.loads((tmp_path / "checkpoint" / "load_step.json").read_text())["rewinds"]
    assert [(r["load_step"], r["newest_before"], r["first_save"]) for r in record] == \
        [(4, 8, 8), (8, 12, 12)]


def test_load_step_of_a_step_set_aside_names_the_renamed_folder_and_how_to_load_it(tmp_path):
    """Was: only "step-8 is not a complete checkpoint", though step-8.superseded holds it whole."""
    rewound_run(tmp_path)
    t, mgr = start(tmp_path, interval=2, keep_latest_k=2, load_step=4)
    run(t, 2, mgr)  # saves step 6, and sets the abandoned step-8 aside
    mgr.close()
    assert folders(tmp_path) == ["step-4", "step-6", "step-8.superseded"]
    ckpt = tmp_path / "checkpoint"
    with pytest.raises(ValueError) as err:
        start(tmp_path, interval=2, load_step=8)
    msg = str(err.value)
    assert msg.startswith(f"checkpoint.load_step = 8: {ckpt / 'step-8'} is not a complete checkpoint "
                          f"(complete ones in {ckpt}: [4, 6]); use -1 for the newest; ")
    assert msg.endswith(f"step-8 was set aside as step-8.superseded (complete) by the first save of a "
                        f"run that resumed from an earlier step: to load it, rename it back (mv "
                        f"{ckpt / 'step-8.superseded'} {ckpt / 'step-8'}) and relaunch")
    (ckpt / "step-8.superseded").rename(ckpt / "step-8")  # as the message says: it loads
    t2, mgr2 = start(tmp_path, interval=2, load_step=8)
    assert t2.step == 8
    mgr2.close()


def test_a_relaunch_after_a_crash_before_retention_does_not_rewind_again(tmp_path):
    rewound_run(tmp_path)
    t, mgr = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    run(t, 4, mgr)  # saves the new step 8, then dies before step 12 (whose retention drops step-4)
    mgr.close()
    assert folders(tmp_path) == ["step-4", "step-8", "step-8.superseded"]
    weights = {k: v.clone() for k, v in t.model.state_dict().items()}
    with captured_warnings() as warns:
        t2, mgr2 = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    assert t2.step == 8  # not 4: the progress since the rewind is kept
    assert all(torch.equal(v, weights[k]) for k, v in t2.model.state_dict().items())
    assert any("load_step = 4 is not applied again" in w and "to rewind to step 4 again, delete" in w
               for w in warns), warns
    run(t2, 4, mgr2)
    mgr2.close()
    assert folders(tmp_path) == ["step-12", "step-8", "step-8.superseded"]


def test_a_relaunch_before_the_rewinds_first_save_rewinds_again(tmp_path):
    rewound_run(tmp_path)
    t, mgr = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    run(t, 3, mgr)  # dies at step 7, before its first save: nothing was set aside
    mgr.close()
    assert folders(tmp_path) == ["step-4", "step-8"]
    t2, mgr2 = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    assert t2.step == 4  # still the rewind the command asks for
    run(t2, 4, mgr2)
    mgr2.close()
    assert folders(tmp_path) == ["step-4", "step-8", "step-8.superseded"]
    t3, mgr3 = start(tmp_path, interval=4, keep_latest_k=2, load_step=4)
    assert t3.step == 8
    mgr3.close()


def test_first_save_after_a_rewind_sets_aside_every_later_step(tmp_path):
    """Steps between load_step and the first save belong to the abandoned continuation too: left
    in place, a relaunch whose first save had not finished would resume from one of them."""
    t, mgr = start(tmp_path, interval=1, keep_latest_k=0)
    run(t, 4, mgr)  # 1, 2, 3, 4
    mgr.close()
    t2, mgr2 = start(tmp_path, interval=4, keep_latest_k=0, load_step=1)
    run(t2, 3, mgr2)  # saves 4 only
    mgr2.close()
    assert folders(tmp_path) == ["step-1", "step-2.superseded", "step-3.superseded", "step-4",
                                 "step-4.superseded"]
    import shutil

    shutil.rmtree(tmp_path / "checkpoint" / "step-4")  # as if that first save had not completed
    t3, mgr3 = start(tmp_path, interval=4, keep_latest_k=0, load_step=1)
    assert t3.step == 1  # the rewound point, not the abandoned step 3
    mgr3.close()


def test_a_resumed_run_that_is_already_complete_says_so(tmp_path):
    t, mgr = start(tmp_path, interval=4)
    run(t, 8, mgr)
    mgr.close()
    for steps, past in ((8, False), (2, True)):
        with captured_warnings() as warns:
            t2 = make_trainer(tmp_path, interval=4)
            t2.cfg.training.steps = steps
            mgr2 = CheckpointManager(t2)
            mgr2.load()
        assert t2.step == 8
        done = [w for w in warns if "already complete" in w]
        assert len(done) == 1, warns
        assert f"step-8 at step 8 and training.steps = {steps}" in done[0]
        assert "raise training.steps above 8" in done[0]
        assert ("lower than the step it was saved at" in done[0]) == past
        mgr2.close()
    with captured_warnings() as warns:  # a run with steps left says nothing of the kind
        t3 = make_trainer(tmp_path, interval=4)
        t3.cfg.training.steps = 9
        mgr3 = CheckpointManager(t3)
        mgr3.load()
    assert not any("already complete" in w for w in warns)
    mgr3.close()


def test_initial_load_at_or_past_training_steps_is_an_error(tmp_path):
    src, mgr = start(tmp_path / "src", interval=8)
    run(src, 8, mgr)
    mgr.close()
    for steps in (2, 8):
        t = make_trainer(tmp_path / f"dst{steps}", initial_load_path=str(tmp_path / "src" / "checkpoint"),
                         initial_load_model_only=False)
        t.cfg.training.steps = steps
        before = {k: v.clone() for k, v in t.model.state_dict().items()}
        m = CheckpointManager(t)
        with pytest.raises(ValueError, match=rf"initial_load_path = .*step-8 was saved at step 8.*"
                           rf"training.steps = {steps}: this run would train and save nothing.*"
                           r"initial_load_model_only = true"):
            m.load()
        assert t.step == 0 and all(torch.equal(v, before[k]) for k, v in t.model.state_dict().items())
        m.close()
    # Weights only, or steps left to train: as before.
    t, m = start(tmp_path / "dst_w", initial_load_path=str(tmp_path / "src" / "checkpoint"))
    assert t.step == 0
    m.close()
    t = make_trainer(tmp_path / "dst_ok", initial_load_path=str(tmp_path / "src" / "checkpoint"),
                     initial_load_model_only=False)
    t.cfg.training.steps = 9
    m = CheckpointManager(t)
    m.load()
    assert t.step == 8
    m.close()
