"""Async checkpoints on one GPU: pinned host copies reused from save to save, and an exact resume.

torch 2.11 (the GPU machines) emptied its stager after every save, so the second async save of a
run failed; the CPU tests run on the newest torch. Here the real trainer saves four times
asynchronously (steps 3 and 6, then 9 and 12 after a resume), and the resumed losses must equal those
of an uninterrupted run bit for bit; the same with the ThunderKittens attention backward. Each
runs with and without deterministic mode's NaN fill of new tensors (run.deterministic_fill). The
async saves run once more from a writer process (checkpoint.async_writer = "process").
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernels.thunderkittens import build

pytestmark = pytest.mark.gpu

REPO = Path(__file__).resolve().parents[2]
COMMON = ["--model.overrides.n_layers=2", "--model.overrides.dim=64", "--training.seq_len=64",
          "--training.local_batch_size=2", "--training.global_batch_size=4", "--run.seed=0",
          "--run.deterministic", "--lr_scheduler.warmup_steps=4", "--metrics.log_freq=1",
          "--lr_scheduler.min_lr_factor=1.0"]  # a constant LR after warm-up: 6- and 12-step runs share it


def _train(dump: Path, name: str, steps: int, *extra: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "trainer.train", "--config", "configs/debug.toml", *COMMON,
           f"--run.dump_folder={dump}", f"--run.name={name}", f"--data.cache_dir={dump / 'cache'}",
           f"--training.steps={steps}", *extra]
    env = dict(os.environ, PYTHONPATH=str(REPO))
    env.pop("WANDB_API_KEY", None)
    proc = subprocess.run(cmd, cwd=REPO, env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return proc


def _losses(run_dir: Path) -> dict[int, float]:
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r["loss_metrics/global_avg_loss"] for r in rows}


def _assert_resumed_steps_match(dump: Path) -> None:
    """Steps 7-12 of the resumed run ("run") equal those of the straight one ("ref") bit for bit."""
    ref, got = _losses(dump / "ref"), _losses(dump / "run")
    for step in range(7, 13):
        assert got[step] == ref[step], (step, got[step], ref[step])


@pytest.mark.parametrize("fill", ["true", "false"])
def test_repeated_async_saves_on_gpu_resume_exactly(tmp_path, fill):
    """SDPA's deterministic backward; with and without the NaN fill of new tensors."""
    _train(tmp_path, "ref", 12, f"--run.deterministic_fill={fill}")
    ckpt = ["--checkpoint.enable", "--checkpoint.interval=3", "--checkpoint.async_mode=async",
            "--checkpoint.keep_latest_k=0", f"--run.deterministic_fill={fill}"]
    first = _train(tmp_path, "run", 6, *ckpt)
    assert "async saves stage into pinned host memory, allocated once and reused" in first.stderr
    second = _train(tmp_path, "run", 12, *ckpt)
    assert "resumed from" in second.stderr and "step-6" in second.stderr
    for step in (3, 6, 9, 12):
        assert (tmp_path / "run" / "checkpoint" / f"step-{step}").is_dir(), step
    _assert_resumed_steps_match(tmp_path)


def test_async_saves_from_a_writer_process_resume_exactly(tmp_path):
    """checkpoint.async_writer = "process": the state is staged into pinned shared memory, which a
    writer process reads; four saves over two runs (one writer process each), exact resume."""
    _train(tmp_path, "ref", 12)
    ckpt = ["--checkpoint.enable", "--checkpoint.interval=3", "--checkpoint.async_mode=async",
            "--checkpoint.async_writer=process", "--checkpoint.keep_latest_k=0"]
    first = _train(tmp_path, "run", 6, *ckpt)
    assert "async saves stage into pinned host memory, allocated once and reused" in first.stderr
    assert "in shared memory (read by the writer process)" in first.stderr
    assert "writing in the background (a writer process)" in first.stderr
    second = _train(tmp_path, "run", 12, *ckpt)
    assert "resumed from" in second.stderr and "step-6" in second.stderr
    for step in (3, 6, 9, 12):
        assert (tmp_path / "run" / "checkpoint" / f"step-{step}" / ".metadata").is_file(), step
    _assert_resumed_steps_match(tmp_path)


@pytest.mark.skipif(not build.available(), reason="needs ThunderKittens and an sm_90 GPU")
@pytest.mark.parametrize("fill", ["true", "false"])
def test_thunderkittens_attention_resumes_exactly(tmp_path, fill):
    """run.deterministic with the TK backward (its fp32 adds in a fixed order): 6 steps, a
    checkpoint, 6 more after a resume give the losses of 12 straight steps bit for bit; also
    without the NaN fill of new tensors (run.deterministic_fill = false)."""
    tk = ["--model.attention=thunderkittens", "--model.overrides.dim=512",  # head dim 128
          "--model.overrides.n_heads=4", "--model.overrides.n_kv_heads=2", "--training.seq_len=256",
          f"--run.deterministic_fill={fill}"]
    _train(tmp_path, "ref", 12, *tk)
    ckpt = ["--checkpoint.enable", "--checkpoint.interval=6", "--checkpoint.keep_latest_k=0"]
    _train(tmp_path, "run", 6, *tk, *ckpt)
    second = _train(tmp_path, "run", 12, *tk, *ckpt)
    assert "resumed from" in second.stderr and "step-6" in second.stderr
    _assert_resumed_steps_match(tmp_path)
