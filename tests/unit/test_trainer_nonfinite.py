"""A non-finite loss or gradient stops the run before the optimizer step corrupts the weights."""

import pytest
import torch


@pytest.fixture
def trainer(tmp_path, monkeypatch):
    from tests.helpers.one_rank import in_process_trainer_env
    from trainer.config import load_config
    from trainer.trainer import Trainer

    cfg = load_config(["--model.overrides.n_layers=1", "--model.overrides.dim=32",
                       "--model.overrides.n_heads=2", "--model.overrides.n_kv_heads=1",
                       "--training.seq_len=16", "--training.local_batch_size=2",
                       "--training.steps=3", "--lr_scheduler.warmup_steps=1",
                       f"--run.dump_folder={tmp_path}", f"--data.cache_dir={tmp_path / 'cache'}"])
    with in_process_trainer_env(monkeypatch):
        t = Trainer(cfg)
        yield t
        t.close()


def test_nan_weights_stop_the_step_and_leave_the_weights_alone(trainer):
    assert torch.isfinite(torch.tensor(trainer.train_step()))
    with torch.no_grad():
        trainer.model.norm.weight[0] = float("nan")  # every token's logits pass through it
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    from trainer.trainer import NonFiniteError

    with pytest.raises(NonFiniteError, match="step 2: loss .* is not finite"):
        trainer.train_step()
    for n, p in trainer.model.named_parameters():
        assert torch.equal(p.detach(), before[n]) or torch.isnan(before[n]).any(), n


def _nan_launch(tmp_path, monkeypatch, *extra: str) -> str:
    """trainer.train.main whose weights become NaN after step 2; its error line."""
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main
    from trainer.trainer import Trainer

    step = Trainer.train_step

    def poisoned(self):
        if self.step == 2:
            with torch.no_grad():
                self.model.norm.weight[0] = float("nan")
        return step(self)

    monkeypatch.setattr(Trainer, "train_step", poisoned)
    with in_process_trainer_env(monkeypatch):
        assert main([*tiny_trainer_args(tmp_path), "--run.name=r", "--training.steps=5", *extra]) == 1


@pytest.mark.parametrize("extra, where", [
    ((), "checkpoint.enable is false: a relaunch starts over at step 0"),
    (("--checkpoint.enable", "--checkpoint.interval=2"), "a relaunch continues from step-2"),
])
def test_the_error_says_where_a_relaunch_continues(tmp_path, monkeypatch, capfd, extra, where):
    # "Relaunch to resume from the last checkpoint" alone misled a run without one (it starts over).
    _nan_launch(tmp_path, monkeypatch, *extra)
    line = next(x for x in capfd.readouterr().err.splitlines() if x.startswith("[rank0] error:"))
    assert "step 3: loss" in line and line.endswith(f"Here {where}.")
