"""A launch refused during start-up prints one `[rankN] error: <message>` line per rank that names
the key or file, and exits 2, instead of a traceback per rank (TITANKIT_TRACEBACK=1 restores it)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, load_config
from trainer.config.validate import check_device_backends


def launch(tmp_path, monkeypatch, *extra: str) -> int:
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    with in_process_trainer_env(monkeypatch):
        return main([*tiny_trainer_args(tmp_path), "--training.steps=1", *extra])


def test_a_config_error_is_printed_once_per_node(tmp_path, monkeypatch, capsys):
    """Under a bare torchrun every rank reads the same config: only each node's first rank says
    what is wrong (was: the same line 8 times on 8 GPUs); every rank exits 2."""
    from trainer.train import main  # the config fails before any process group exists

    for local_rank, lines in (("0", 1), ("1", 0)):
        monkeypatch.setenv("LOCAL_RANK", local_rank)
        assert main(["--training.stepz=3"]) == 2
        err = capsys.readouterr().err
        assert err.count("error: command line: unknown key training.stepz") == lines and len(err.splitlines()) == lines


def test_a_run_folder_that_cannot_be_made_names_the_keys(tmp_path, monkeypatch, capsys):
    (tmp_path / "file").write_text("not a folder")
    dump = f"--run.dump_folder={tmp_path / 'file'}", "--run.name=x"
    assert launch(tmp_path, monkeypatch, *dump) == 2
    err = capsys.readouterr().err
    assert (f"[rank0] error: run.dump_folder / run.name: cannot create the run folder "
            f"{tmp_path / 'file' / 'x'} (Not a directory); choose a writable run.dump_folder") in err
    assert "TITANKIT_TRACEBACK=1 prints the traceback" in err and "Traceback" not in err
    monkeypatch.setenv("TITANKIT_TRACEBACK", "1")
    with pytest.raises(ValueError, match="cannot create the run folder"):
        launch(tmp_path, monkeypatch, *dump)


def test_a_checkpoint_folder_that_cannot_be_written_is_refused_before_the_first_step(
        tmp_path, monkeypatch, capsys):
    # Was found only at the first save, `interval` steps later, as a traceback per rank.
    from trainer.trainer import Trainer

    (tmp_path / "x").mkdir()
    (tmp_path / "x" / "checkpoint").write_text("not a folder")
    trained = []
    monkeypatch.setattr(Trainer, "train_step", lambda self: trained.append(1) or 1.0)
    assert launch(tmp_path, monkeypatch, "--run.name=x", "--checkpoint.enable",
                  "--checkpoint.interval=5", "--training.steps=6") == 2
    err = capsys.readouterr().err
    assert (f"[rank0] error: checkpoint.folder = 'checkpoint': checkpoints cannot be written into "
            f"{tmp_path / 'x' / 'checkpoint'}: it exists and is a file, not a folder (found by rank 0 "
            "on ") in err
    assert "Traceback" not in err and not trained
    assert (tmp_path / "x" / "checkpoint").read_text() == "not a folder"  # left as it was


def test_thunderkittens_off_cuda_is_refused_naming_the_key(tmp_path, monkeypatch, capsys):
    assert launch(tmp_path, monkeypatch, "--model.attention=thunderkittens") == 2
    assert ('[rank0] error: command line: model.attention = "thunderkittens" needs an NVIDIA Hopper '
            'GPU (sm_90a) and this run\'s device is cpu; use "sdpa" here') in capsys.readouterr().err
    fp8 = load_config(["--float8.enable", "--float8.backend=thunderkittens"])
    with pytest.raises(ConfigError, match=r'command line: float8.backend = "thunderkittens" .* use "torch"'):
        check_device_backends(fp8, "cpu")
    check_device_backends(fp8, "cuda")
    check_device_backends(load_config(["--float8.backend=thunderkittens"]), "cpu")  # FP8 off: unused


def test_triton_off_cuda_is_refused_unless_the_interpreter_is_on(tmp_path, monkeypatch, capsys):
    # Before: start-up passed and the first forward raised a traceback per rank from the kernel.
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    assert launch(tmp_path, monkeypatch, "--model.attention=triton") == 2
    assert ('[rank0] error: command line: model.attention = "triton" needs a CUDA GPU and this run\'s '
            'device is cpu; use "sdpa" here (or export TRITON_INTERPRET=1') in capsys.readouterr().err
    fp8 = load_config(["--float8.enable", "--float8.backend=triton"])
    with pytest.raises(ConfigError, match=r'float8.backend = "triton" .* use "torch" \(emulated'):
        check_device_backends(fp8, "cpu")
    check_device_backends(fp8, "cuda")
    monkeypatch.setenv("TRITON_INTERPRET", "1")  # the CPU kernel tests' way: allowed
    check_device_backends(fp8, "cpu")


def test_a_non_finite_step_ends_the_run_with_its_message(tmp_path, monkeypatch, capsys):
    from trainer.trainer import NonFiniteError, Trainer

    def diverged(self):
        raise NonFiniteError("step 1: loss nan / grad norm nan is not finite; the step was not applied")

    monkeypatch.setattr(Trainer, "train_step", diverged)
    assert launch(tmp_path, monkeypatch, "--run.name=x") == 1
    err = capsys.readouterr().err
    assert "[rank0] error: step 1: loss nan / grad norm nan is not finite" in err
    assert "(training stopped, exit status 1; NonFiniteError" in err


@pytest.mark.parametrize("mode", ["disabled", "async"])
def test_a_failed_checkpoint_write_ends_the_run_with_one_line(tmp_path, monkeypatch, capsys, mode):
    # Was a RuntimeError with DCP's per-rank tracebacks inside it (300+ lines on 2 ranks).
    import errno

    import trainer.checkpoint
    from trainer.checkpoint_checksums import RecordingWriter

    class FullDisk(RecordingWriter):
        def write_data(self, plan, planner):
            if Path(str(self.path)).name == "step-2":
                raise OSError(errno.ENOSPC, "No space left on device")
            return super().write_data(plan, planner)

    monkeypatch.setattr(trainer.checkpoint, "RecordingWriter", FullDisk)
    assert launch(tmp_path, monkeypatch, "--run.name=x", "--checkpoint.enable", "--training.steps=3",
                  "--checkpoint.interval=1", f"--checkpoint.async_mode={mode}") == 1
    err = capsys.readouterr().err
    step2 = tmp_path / "x" / "checkpoint" / "step-2"
    line = next(x for x in err.splitlines() if x.startswith("[rank0] error: "))
    assert line.startswith(f"[rank0] error: {'async save: ' if mode == 'async' else ''}checkpoint "
                           f"{step2} could not be written (no space left on the device; ")
    assert line.endswith("): rank 0: OSError: [Errno 28] No space left on device. The folder stays "
                         "incomplete and a relaunch skips it; the newest complete checkpoint is "
                         "step-1. Free space there (or lower checkpoint.keep_latest_k) and relaunch: "
                         "it continues from step-1")
    assert "(training stopped, exit status 1; CheckpointWriteError" in err and "Traceback" not in err


def test_config_warnings_are_log_lines_not_python_warnings(tmp_path, monkeypatch, capsys, logs):
    import logging

    import trainer.config.checks as checks

    monkeypatch.setattr(checks, "_WARNED", set())  # said once per process: maybe earlier, elsewhere
    assert launch(tmp_path, monkeypatch, "--lr_scheduler.warmup_steps=4") == 0
    assert any(m.startswith("lr_scheduler.warmup_steps = 4 (command line) > training.steps = 1")
               for m in logs.at(logging.WARNING))
    err = capsys.readouterr().err
    assert "UserWarning" not in err and "check_values(cfg)" not in err, err


def test_a_relaunch_with_another_checkpoint_folder_says_where_the_checkpoints_are(tmp_path, monkeypatch, logs):
    """It started over at step 0 with only an INFO line ('nothing to resume from')."""
    import logging

    ckpt = ("--checkpoint.enable=true", "--run.name=r")
    assert launch(tmp_path, monkeypatch, *ckpt) == 0  # saves step-1 into r/checkpoint
    assert not logs.at(logging.WARNING, "holds complete checkpoints")
    assert launch(tmp_path, monkeypatch, *ckpt, "--checkpoint.folder=ckpt") == 0
    (warning,) = logs.at(logging.WARNING, "holds complete checkpoints")
    assert (f"checkpoint.folder = 'ckpt' holds no checkpoint, so this run starts at step 0, but "
            f"{tmp_path / 'r' / 'checkpoint'} holds complete checkpoints of this run (steps 1)") in warning
    assert "Set checkpoint.folder = 'checkpoint' to resume from step 1" in warning
    # A run with checkpoints of its own resumes them; an initial_load_path is then named as not loaded.
    other = tmp_path / "r" / "ckpt"
    assert launch(tmp_path, monkeypatch, *ckpt, f"--checkpoint.initial_load_path={other}") == 0
    (info,) = logs.at(logging.INFO, "initial_load_path applies only")
    assert info.startswith(f"checkpoint: resuming this run's own {tmp_path / 'r' / 'checkpoint' / 'step-1'}")
