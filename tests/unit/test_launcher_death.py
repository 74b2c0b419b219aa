"""A rank does not outlive its torchrun (trainer/preemption.py end_with_the_launcher): seen when
scripts/train.sh stopped a torchrun that was starting a restarted group, which left a new rank
running alone in start-up, waiting for a group that never came."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
RANK = "from trainer.preemption import end_with_the_launcher; end_with_the_launcher(); " \
       "print('ready', flush=True); import time; time.sleep(120)"
LAUNCHER = f"""
import subprocess, sys, time
rank = subprocess.Popen([sys.executable, "-c", {RANK!r}], stdout=subprocess.PIPE, text=True)
assert rank.stdout.readline() == "ready\\n"
print(rank.pid, flush=True)
time.sleep(120)
"""

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="Linux's parent-death signal")


def gone(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split(")")[-1].split()[0]
    except FileNotFoundError:
        return True
    return state in ("Z", "X")  # dead; a zombie until whoever adopted it reaps it


def env(**extra: str) -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=str(REPO), TORCHELASTIC_RUN_ID="test", **extra)


def test_a_rank_dies_with_its_launcher():
    launcher = subprocess.Popen([sys.executable, "-c", LAUNCHER], stdout=subprocess.PIPE, text=True, env=env())
    rank = int(launcher.stdout.readline())
    try:
        assert not gone(rank)
        launcher.kill()  # torchrun gone without stopping its ranks
        launcher.wait()
        deadline = time.monotonic() + 10
        while not gone(rank) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert gone(rank), "the rank outlived its launcher"
    finally:
        if not gone(rank):
            os.kill(rank, signal.SIGKILL)


def test_a_rank_whose_launcher_exited_before_it_started_stops_at_once():
    # train.sh names torchrun's pid; a rank whose parent is another process (here: pytest's) stops.
    proc = subprocess.run([sys.executable, "-c", RANK], env=env(TITANKIT_LAUNCHER_PID="1", RANK="3"),
                          capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (1, "")
    assert proc.stderr == "[rank3] error: its torchrun (pid 1) has exited; stopping\n"


def test_outside_torchrun_nothing_changes():
    e = {k: v for k, v in env(TITANKIT_LAUNCHER_PID="1").items() if k != "TORCHELASTIC_RUN_ID"}
    code = RANK.replace("time.sleep(120)", "pass")
    proc = subprocess.run([sys.executable, "-c", code], env=e, capture_output=True, text=True, timeout=60)
    assert (proc.returncode, proc.stdout) == (0, "ready\n")
