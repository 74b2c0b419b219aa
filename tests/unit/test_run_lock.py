"""The run-folder lock: a second launch into a live run's folder is refused on every rank, naming the
holder; a dead holder (exited, SIGKILLed, or survived only by its children) leaves the folder free."""

from __future__ import annotations

import errno
import json
import logging
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from trainer.run_lock import LOCK_NAME, RunFolderInUse, acquire_run_lock

REPO = Path(__file__).resolve().parents[2]

# A stand-in for a launch's rank 0: takes the lock, optionally leaves children behind (a plain fork
# and a multiprocessing "spawn" child, as DCP's writer process is started), prints "locked <child
# pids>", then waits for a line on stdin (or a signal) before it exits.
HOLDER = """
import multiprocessing, os, sys, time

from trainer.run_lock import acquire_run_lock

if __name__ == "__main__":
    lock = acquire_run_lock(sys.argv[1])
    children = []
    if "--children" in sys.argv:
        pid = os.fork()
        if pid == 0:
            time.sleep(60)
            os._exit(0)
        children.append(pid)
        child = multiprocessing.get_context("spawn").Process(target=time.sleep, args=(60,))
        child.start()
        children.append(child.pid)
    print("locked", *children, flush=True)
    sys.stdin.readline()
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1", "CUDA_VISIBLE_DEVICES": ""}


@pytest.fixture
def holder(tmp_path):
    """start(run_dir, *args) -> (process, child pids); everything it started is killed afterwards."""
    script = tmp_path / "holder.py"
    script.write_text(HOLDER)
    started: list[tuple[subprocess.Popen, list[int]]] = []

    def start(run_dir: Path, *args: str) -> tuple[subprocess.Popen, list[int]]:
        proc = subprocess.Popen([sys.executable, str(script), str(run_dir), *args], env=_env(),
                                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        line = proc.stdout.readline().split()
        assert line[:1] == ["locked"], f"holder did not take the lock: {line}"
        started.append((proc, [int(p) for p in line[1:]]))
        return started[-1]

    yield start
    for proc, children in started:
        for pid in children:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        proc.kill()
        proc.wait()


def test_a_second_launch_is_refused_naming_the_holder(tmp_path, holder):
    proc, _ = holder(tmp_path, "--run.name=first")
    with pytest.raises(RunFolderInUse) as err:
        acquire_run_lock(tmp_path)
    msg = str(err.value)
    for part in (f"run folder {tmp_path} is in use by another launch", f"pid {proc.pid}",
                 f"on host {socket.gethostname()}", "holder.py", "--run.name=first", " UTC",
                 "wait for it to end, stop it, or set another run.name"):
        assert part in msg, (part, msg)


@pytest.mark.parametrize("end", ["exits", "is killed"])
def test_the_folder_is_free_once_the_holder_is_gone_and_records_the_new_holder(tmp_path, holder, end):
    old = "--old-holder-" + "x" * 300  # longer than the new record: it must not leave a tail behind
    proc, _ = holder(tmp_path, old)
    if end == "exits":
        proc.communicate("\n", timeout=30)
    else:  # a torchrun restart after the previous attempt's rank 0 was killed
        proc.send_signal(signal.SIGKILL)
        proc.wait(timeout=30)
    lock = acquire_run_lock(tmp_path)
    try:
        assert lock.locked
        text = (tmp_path / LOCK_NAME).read_text()
        record = json.loads(text)  # the old content is gone, not merely overwritten in front
        assert record["pid"] == os.getpid() and record["host"] == socket.gethostname()
        assert "old-holder" not in text
    finally:
        lock.release()


def test_children_of_a_dead_holder_do_not_keep_the_folder_locked(tmp_path, holder):
    proc, children = holder(tmp_path, "--children")
    assert len(children) == 2
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    for pid in children:
        os.kill(pid, 0)  # still alive: only the fd they may have inherited could hold the lock
    acquire_run_lock(tmp_path).release()


def test_release_frees_the_folder_within_one_process(tmp_path):
    lock = acquire_run_lock(tmp_path)
    with pytest.raises(RunFolderInUse, match="that is this process: an earlier Trainer"):
        acquire_run_lock(tmp_path)
    lock.release()
    lock.release()  # idempotent: Trainer.close() may run after a failed step
    acquire_run_lock(tmp_path).release()


@pytest.mark.parametrize("code", [errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL])
def test_a_file_system_without_locks_warns_and_the_run_goes_on(tmp_path, monkeypatch, logs,
                                                               code):
    import fcntl

    def refuse(fd, op):
        raise OSError(code, os.strerror(code))

    monkeypatch.setattr(fcntl, "flock", refuse)
    lock = acquire_run_lock(tmp_path)
    assert not lock.locked and os.strerror(code) in lock.reason
    warned = logs.at(logging.WARNING)
    assert len(warned) == 1
    assert f"run folder {tmp_path} cannot be locked" in warned[0]
    assert "make sure only one job uses this run.name" in warned[0]


def test_another_lock_error_is_not_mistaken_for_a_busy_folder(tmp_path, monkeypatch):
    import fcntl

    def broken(fd, op):
        raise OSError(errno.EIO, os.strerror(errno.EIO))

    monkeypatch.setattr(fcntl, "flock", broken)
    with pytest.raises(OSError) as err:
        acquire_run_lock(tmp_path)
    assert err.value.errno == errno.EIO and not isinstance(err.value, RunFolderInUse)


RANKS = """
import sys
import torch.distributed as dist
from trainer.run_lock import lock_run_folder

rank = int(sys.argv[3])
dist.init_process_group("gloo", init_method="file://" + sys.argv[4], rank=rank, world_size=2)
for folder in sys.argv[1:3]:
    try:
        lock = lock_run_folder(folder, rank)
        print("locked" if lock is not None and lock.locked else "none", flush=True)
    except RuntimeError as exc:
        print("error", str(exc).replace(chr(10), " "), flush=True)
dist.destroy_process_group()
"""


def test_every_rank_gets_rank0s_verdict(tmp_path, holder):
    busy, free = tmp_path / "busy", tmp_path / "free"
    busy.mkdir()
    free.mkdir()
    proc, _ = holder(busy, "--run.name=first")
    script = tmp_path / "ranks.py"
    script.write_text(RANKS)
    ranks = [subprocess.Popen([sys.executable, str(script), str(busy), str(free), str(r),
                               str(tmp_path / "rendezvous")], env=_env(), stdout=subprocess.PIPE,
                              text=True) for r in range(2)]
    outs = [p.communicate(timeout=120)[0].splitlines() for p in ranks]
    for r, out in enumerate(outs):
        assert len(out) == 2, (r, out)
        assert out[0].startswith(f"error run folder {busy} is in use by another launch (pid {proc.pid}"), (r, out)
    assert [out[1] for out in outs] == ["locked", "none"]  # only rank 0 holds the free folder
