"""A rank whose collective fails because another rank is gone (its process ended) or stuck: one
error line naming this rank, the step and that the cause is the other rank's, and status 1, instead
of a 60-line traceback ending in gloo's "Connection closed by peer" that reads as this rank's own
failure (torchrun's summary often names it as the root cause). In-process 1-rank runs; the
collective's error is raised from inside a step, with gloo's exact words."""

from __future__ import annotations

import pytest

from trainer.distributed import peer_failure
from trainer.trainer import Trainer

MICRO_BATCH = Trainer._micro_batch

CLOSED = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/pair.cc:553] Connection closed "
          "by peer [127.0.0.1]:37260. This is typically caused by a remote worker crashing. Check "
          "the logs of the remote worker before reporting an error. GLHF! \U0001f3d6\ufe0f")
TIMED_OUT = ("[/__w/pytorch/pytorch/third_party/gloo/gloo/transport/tcp/unbound_buffer.cc:129] "
             "Timed out waiting 5000ms for send operation to complete")


def launch(tmp_path, monkeypatch, error: BaseException) -> int:
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    def micro_batch(self):
        if self.step == 2:
            raise error
        return MICRO_BATCH(self)

    monkeypatch.setattr(Trainer, "_micro_batch", micro_batch)
    with in_process_trainer_env(monkeypatch):
        return main([*tiny_trainer_args(tmp_path), "--run.name=r", "--training.steps=4"])


def test_a_lost_peer_is_one_error_line_and_status_1(tmp_path, monkeypatch, capfd):
    assert launch(tmp_path, monkeypatch, RuntimeError(CLOSED)) == 1
    err = capfd.readouterr().err
    assert "Traceback" not in err
    line = next(x for x in err.splitlines() if x.startswith("[rank0] error:"))
    assert line.startswith("[rank0] error: step 2: another rank stopped (its process ended or its "
                           "connection broke), so this rank's collective failed")
    assert "gloo: Connection closed by peer [127.0.0.1]:37260" in line and line.isascii()


def test_a_timed_out_collective_names_the_timeout(monkeypatch):
    why = peer_failure(RuntimeError(TIMED_OUT), "step 7")
    assert why.startswith("step 7: a collective timed out: another rank is stuck, far slower, or "
                          "stopped")
    assert "gloo: Timed out waiting 5000ms for send operation to complete" in why


@pytest.mark.parametrize("exc", [RuntimeError("CUDA out of memory"), ValueError(CLOSED), KeyError("x")])
def test_other_errors_are_not_blamed_on_another_rank(exc):
    assert peer_failure(exc, "step 1") is None


def test_other_errors_keep_their_traceback(tmp_path, monkeypatch):
    with pytest.raises(RuntimeError, match="CUDA out of memory"):
        launch(tmp_path, monkeypatch, RuntimeError("CUDA out of memory"))


def test_a_peer_lost_during_start_up_is_named_so(tmp_path, monkeypatch, capfd):
    # Rank 1 refused its data and left; rank 0 met that in its next start-up collective.
    import trainer.trainer as trainer_module
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    def lost(*args, **kwargs):
        raise RuntimeError(CLOSED)

    monkeypatch.setattr(trainer_module, "build_dataset", lost)
    with in_process_trainer_env(monkeypatch):
        assert main([*tiny_trainer_args(tmp_path), "--run.name=r"]) == 2
    err = capfd.readouterr().err
    line = next(x for x in err.splitlines() if x.startswith("[rank0] error:"))
    assert line.startswith("[rank0] error: start-up: another rank stopped (its process ended or "
                           "its connection broke)")
    assert line.isascii()
