"""Preemption signals as Slurm delivers them, and Ctrl-C as a terminal does, through scripts/train.sh
on 2 CPU gloo ranks.

`#SBATCH --signal=USR1@T` (no B:) sends USR1 to every process of the job step at once: train.sh,
torchrun and the training ranks. `--signal=B:USR1@T` on a job whose batch script is train.sh reaches
train.sh alone. Both must end with the current step saved and exit status 0 (README, preemption).
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from tests.distributed.test_checkpoint_resume import (
    CONFIG,
    REPO,
    children,
    env,
    logged_steps,
    saved_state,
    train_sh,
    wait_for_step,
)

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def dump(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("preempt")
    # deterministic mode is not what these tests are about, and costs time on 2 cores
    config = CONFIG.format(dump=d).replace("deterministic = true", "deterministic = false")
    (d / "job.toml").write_text(config)
    return d


def process_tree(root: int) -> list[int]:
    """root and all its descendants, parents first."""
    tree, i = [root], 0
    while i < len(tree):
        try:
            tree += children(tree[i])
        except FileNotFoundError:  # ended meanwhile
            pass
        i += 1
    return tree


def end_tree(proc: subprocess.Popen) -> None:
    """After a failed check: end train.sh, torchrun and the ranks, none left running."""
    for pid in reversed(process_tree(proc.pid)):
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    proc.wait()


def stop_and_check_saved(dump: Path, name: str, send) -> tuple[int, str]:
    """Start a long run, preempt it at step 3 with send(train.sh's Popen), check the saved step."""
    run = dump / name
    proc = train_sh(dump, f"--run.name={name}", "--training.steps=10000",
                    "--checkpoint.interval=10000")
    try:
        wait_for_step(run, proc, 3, timeout=60)
        send(proc)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            end_tree(proc)
    assert proc.returncode == 0, err[-4000:]
    last = logged_steps(run)[-1]
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == [f"step-{last}"]
    assert (run / "checkpoint" / f"step-{last}" / ".metadata").is_file()
    assert saved_state(run / "checkpoint" / f"step-{last}")["step"] == last
    assert err.count(f"checkpoint of step {last} saved, exiting") == 2  # both ranks stopped there
    # saved once, although each rank got the signal twice (from Slurm and from train.sh)
    assert err.count("preemption signal: saving a checkpoint") == 1, err[-4000:]
    return last, err


def test_usr1_to_every_process_of_the_step_saves_and_exits_0(dump):
    def slurm_usr1(proc: subprocess.Popen) -> None:
        tree = process_tree(proc.pid)
        assert len(tree) >= 4, tree  # train.sh, torchrun, 2 ranks
        for pid in tree:
            os.kill(pid, signal.SIGUSR1)

    last, _ = stop_and_check_saved(dump, "slurm", slurm_usr1)
    # Relaunching the same command continues from the saved step.
    proc = train_sh(dump, "--run.name=slurm", f"--training.steps={last + 2}",
                    "--checkpoint.interval=10000")
    try:
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            end_tree(proc)
    assert proc.returncode == 0, err[-4000:]
    assert "resumed from" in err and f"step-{last}" in err, err[-4000:]
    assert logged_steps(dump / "slurm")[-3:] == [last, last + 1, last + 2]


def test_usr1_to_train_sh_alone_saves_and_exits_0(dump):
    # --signal=B:USR1 with train.sh as the batch script: only train.sh sees it and forwards it.
    stop_and_check_saved(dump, "batch", lambda proc: proc.send_signal(signal.SIGUSR1))


def test_sigterm_without_checkpoints_warns_and_exits_non_zero(dump):
    run = dump / "nockpt"
    # MAX_RESTARTS as in scripts/multinode.sbatch: ranks that stop unsaved must not be restarted
    proc = train_sh(dump, "--run.name=nockpt", "--training.steps=10000",
                    "--checkpoint.enable=false", MAX_RESTARTS="1")
    try:
        wait_for_step(run, proc, 3, timeout=60)
        proc.send_signal(signal.SIGTERM)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            end_tree(proc)
    # README: the ranks exit 128 + 15, torchrun and so train.sh 1 (a job that did not finish)
    assert proc.returncode == 1, err[-4000:]
    warning = "nothing is saved because checkpoint.enable is false; exiting with status 143"
    assert err.count(warning) == 1, err[-4000:]
    assert next(line for line in err.splitlines() if warning in line).startswith("[rank0]")
    steps = logged_steps(run)
    assert steps == sorted(set(steps)), steps  # one attempt: the group was not started again
    assert not (run / "checkpoint").exists()


def test_ctrl_c_saves_the_step_and_exits_130_without_tracebacks(dump):
    # A terminal sends SIGINT to its foreground process group: train.sh and torchrun, not the ranks
    # (torchrun starts each in its own session). train.sh forwards it; torchrun ignores it.
    run = dump / "ctrl_c"
    e = dict(env(), NGPU="2", CONFIG=str(dump / "job.toml"), PYTHON=sys.executable, MAX_RESTARTS="1")
    proc = subprocess.Popen(["bash", str(REPO / "scripts" / "train.sh"), "--run.name=ctrl_c",
                             "--training.steps=10000", "--checkpoint.interval=10000"],
                            cwd=REPO, env=e, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                            text=True, start_new_session=True)
    try:
        wait_for_step(run, proc, 3, timeout=60)
        os.killpg(proc.pid, signal.SIGINT)
        _, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            end_tree(proc)
    assert proc.returncode == 130, err[-4000:]  # interrupted, as a shell reports it
    last = logged_steps(run)[-1]
    assert sorted(p.name for p in (run / "checkpoint").iterdir()) == [f"step-{last}"]
    assert saved_state(run / "checkpoint" / f"step-{last}")["step"] == last
    assert err.count("[rank0] Ctrl-C: stopping after this step, once it is saved") == 1, err[-4000:]
    assert err.count("Ctrl-C: saving a checkpoint of step") == 1, err[-4000:]
    assert err.count(f"checkpoint of step {last} saved, exiting") == 2  # both ranks, no restart
    assert "Traceback" not in err and "KeyboardInterrupt" not in err, err[-4000:]
