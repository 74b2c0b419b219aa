"""parallelism.fsdp_grad_sync = "auto" on one GPU: FSDP's group has one rank, so the trainer sums the
micro-batches' gradients unsharded in fp32 and reduces once per step. The losses must be bitwise those
of reducing after every micro-batch (run.deterministic), and the log must say which was chosen."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]


def _train(dump: Path, name: str, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainer.train", "--config", "configs/debug.toml",
           "--model.overrides.n_layers=2", "--training.seq_len=256", "--training.local_batch_size=2",
           "--training.global_batch_size=8", "--training.steps=6", "--run.deterministic",
           "--metrics.log_freq=1", f"--run.dump_folder={dump}", f"--run.name={name}",
           f"--data.cache_dir={dump / 'cache'}", *extra]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _losses(run_dir: Path) -> list[float]:
    return [json.loads(line)["loss_metrics/global_avg_loss"]
            for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def test_auto_grad_sync_on_one_gpu_reduces_once_with_the_same_losses(tmp_path):
    auto = _train(tmp_path, "auto")  # the default
    assert "fsdp_grad_sync = auto: FSDP has one rank and an fp32 reduce" in auto.stderr
    assert "reduced 1 times per step" in auto.stderr
    every = _train(tmp_path, "every", "--parallelism.fsdp_grad_sync=every_micro_batch")
    assert "fsdp_grad_sync = auto" not in every.stderr
    a, b = _losses(tmp_path / "auto"), _losses(tmp_path / "every")
    assert len(a) == 6 and a == b, (a, b)
