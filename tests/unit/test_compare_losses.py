"""scripts/compare_losses.py: the loss-curve comparison used for backends, FP8 and layouts."""

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

from compare_losses import compare  # noqa: E402


def _rows(losses):
    return [{"step": i + 1, "loss_metrics/global_avg_loss": v} for i, v in enumerate(losses)]


def test_compare_reports_max_and_tail_difference():
    a = _rows([10.0, 8.0, 6.0, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.0])
    b = _rows([10.0, 8.0, 6.3, 5.0, 4.0, 4.0, 4.0, 4.0, 4.0, 4.04])
    c = compare(a, b)
    assert c["max_rel"] == pytest.approx(0.05) and c["max_rel_step"] == 3
    assert c["tail_mean_rel"] == pytest.approx(0.01)  # last 10% of 10 steps = step 10


@pytest.mark.slow
def test_same_config_twice_gives_identical_curves_on_cpu():
    """Two runs of one config on the same data agree exactly on CPU: the comparison is sound."""
    tiny = ("--model.overrides.n_layers=1 --model.overrides.dim=32 --model.overrides.n_heads=2 "
            "--model.overrides.n_kv_heads=1 --training.seq_len=32 --training.local_batch_size=2 "
            "--lr_scheduler.warmup_steps=1")
    proc = subprocess.run(
        [sys.executable, "scripts/compare_losses.py", "--config", "configs/debug.toml", "--steps", "3",
         "--ngpu", "2", "--common", tiny, "--a=--training.max_norm=1.0",
         "--b=--training.max_norm=1.0"],
        cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "max relative difference" in proc.stdout
    rel = float(proc.stdout.split("max relative difference ")[1].split()[0])
    assert rel == 0.0  # same config, same data, CPU: bitwise the same run
