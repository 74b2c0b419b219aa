"""scripts/launch_group.py: a torchrun job that times out, or whose caller is stopped, leaves no process
behind. A stand-in for torchrun (no training, seconds) reproduces what made the ranks outlive it: each
rank runs in a session of its own, ignores the SIGTERM meant to stop it (a rank hung in a collective)
and has a child of its own; the stand-in itself dies at the first SIGTERM."""

import _thread
import importlib.util
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "scripts"))

import compare_losses  # noqa: E402
import launch_group  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.isdir("/proc/self"), reason="reads /proc (Linux)")

RANK = """
import os, signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
with open(sys.argv[1], "a") as f:
    f.write(f"{os.getpid()} {child.pid}\\n")
time.sleep(120)
"""

LAUNCHER = """
import os, subprocess, sys, time
pids, ranks, live = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
with open(pids, "a") as f:
    f.write(f"{os.getpid()}\\n")
for _ in range(ranks):  # like torchrun: every rank in a new session
    subprocess.Popen([sys.executable, "-c", sys.argv[4], pids], start_new_session=True)
print("launched", flush=True)
print("to stderr", file=sys.stderr, flush=True)
time.sleep(live)
sys.exit(3)
"""


def fake_torchrun(pids: Path, ranks: int = 2, live: float = 120.0) -> list[str]:
    return [sys.executable, "-c", LAUNCHER, str(pids), str(ranks), str(live), RANK]


def wait_for_pids(pids: Path, count: int, timeout: float = 30.0) -> list[int]:
    """The launcher's and every rank's and rank child's pid, once all have started."""
    deadline = time.monotonic() + timeout
    while True:
        found = [int(x) for x in pids.read_text().split()] if pids.exists() else []
        if len(found) == count:
            return found
        if time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    raise AssertionError(f"the fake job did not start: {pids.read_text() if pids.exists() else ''}")


def alive(pid: int) -> bool:
    """Running or stopped; a zombie (dead, not yet reaped by init) does not count."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    return stat[stat.rindex(")") + 2] != "Z"


def assert_all_gone(pids: list[int]) -> None:
    left = [p for p in pids if alive(p)]
    assert not left, f"processes left alive: {left}"


@pytest.fixture
def pids(tmp_path):
    """Where the stand-in writes its pids; whatever is still alive afterwards is killed, so a test
    that fails does not leave its processes to the next one."""
    path = tmp_path / "pids"
    yield path
    for pid in (int(x) for x in path.read_text().split()) if path.exists() else []:
        if alive(pid):
            os.kill(pid, signal.SIGKILL)


def test_a_finished_job_is_like_subprocess_run():
    proc = launch_group.run_group([sys.executable, "-c", "import sys; print('out'); print('err', "
                                   "file=sys.stderr); sys.exit(3)"], timeout=60)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\n", "err\n")


def test_with_a_log_the_output_goes_there_as_printed_and_is_returned_as_before(tmp_path):
    """log=: stdout and stderr merged in the order printed, after the caller's header; what comes back
    is that output (as stdout), so a caller that parses it sees what it saw without a log."""
    log = tmp_path / "job.log"
    log.write_text("the command\n\n")
    job = [sys.executable, "-c", "import sys; print('out', flush=True); print('err', file=sys.stderr, "
           "flush=True); print('out2'); sys.exit(3)"]
    proc = launch_group.run_group(job, timeout=60, log=log)
    assert (proc.returncode, proc.stdout, proc.stderr) == (3, "out\nerr\nout2\n", "")
    assert log.read_text() == "the command\n\nout\nerr\nout2\n"


def test_a_timeout_with_a_log_keeps_the_output_there_and_in_the_exception(pids, tmp_path):
    log = tmp_path / "job.log"
    log.write_text("the command\n\n")
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        launch_group.run_group(fake_torchrun(pids), timeout=3, grace=1, log=log)
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))
    assert (exc.value.stdout, exc.value.stderr) == ("launched\nto stderr\n", "")
    assert log.read_text() == "the command\n\nlaunched\nto stderr\n"


def test_a_timeout_ends_the_launcher_its_ranks_and_their_children(pids):
    start = time.monotonic()
    with pytest.raises(subprocess.TimeoutExpired) as exc:
        launch_group.run_group(fake_torchrun(pids), timeout=3, grace=1)
    took = time.monotonic() - start
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))
    assert exc.value.timeout == 3
    assert exc.value.stdout == "launched\n" and exc.value.stderr == "to stderr\n"  # kept, as str
    assert took < 3 + 1 + 8  # the grace is bounded: the ranks that ignore SIGTERM are killed


def test_ranks_that_outlive_their_launcher_are_ended(pids):
    """torchrun killed from outside (OOM killer): the job ends with its exit status, and the ranks it
    left behind, known from while it ran, are ended too."""
    proc = launch_group.run_group(fake_torchrun(pids, live=2.0), timeout=60, grace=1)
    assert proc.returncode == 3 and proc.stdout == "launched\n"
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))


def test_ctrl_c_in_the_caller_ends_the_job_and_propagates(pids):

    def interrupt_once_started():
        wait_for_pids(pids, 5)
        _thread.interrupt_main()  # what Ctrl-C does to the main thread

    threading.Thread(target=interrupt_once_started, daemon=True).start()
    with pytest.raises(KeyboardInterrupt):
        launch_group.run_group(fake_torchrun(pids), timeout=60, grace=1)
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))


def test_sigterm_to_the_caller_ends_the_job_and_exits_143(pids):
    caller = subprocess.Popen(
        [sys.executable, "-c", "import sys, launch_group; launch_group.run_group(sys.argv[1:], timeout=60, "
         "grace=1)", *fake_torchrun(pids)],
        env=dict(os.environ, PYTHONPATH=str(ROOT / "scripts")), stderr=subprocess.PIPE, text=True)
    try:
        started = wait_for_pids(pids, 5)
        caller.send_signal(signal.SIGTERM)
        _, err = caller.communicate(timeout=30)
    finally:
        caller.kill()
    assert caller.returncode == 128 + signal.SIGTERM
    assert err == "stopped by SIGTERM; the job and all its processes were ended\n"  # no traceback
    assert_all_gone(started)


def wait_for_text(path: Path, text: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while not (path.exists() and text in path.read_text()):
        if time.monotonic() >= deadline:
            raise AssertionError(f"{path} never held {text!r}: {path.read_text() if path.exists() else ''}")
        time.sleep(0.05)


# A script run as bench_train or compare_losses runs one job, on the stand-in instead of torchrun.
STOPPED_CALLER = """
import sys
from pathlib import Path
import launch_group
script, folder, *fake = sys.argv[1:]
mod = __import__(script)
mod.run_group = lambda cmd, **kw: launch_group.run_group(fake, **{**kw, "grace": 1})
if script == "compare_losses":
    mod.run("configs/debug.toml", [], 2, 2, Path(folder), "a", 60.0)
else:
    mod.run_variant(mod.Variant(name="a", config="configs/debug.toml", ngpu=2), 1, 1, Path(folder),
                    Path(folder), 60.0)
"""


@pytest.mark.parametrize("script", ["compare_losses", "bench_train"])
def test_a_script_stopped_by_sigterm_leaves_the_output_so_far_in_its_log(script, pids, tmp_path):
    """The log fills while the run goes: SIGTERM to the script (a scheduler's stop, a job's time
    limit) leaves the command, everything the run printed, and one line saying it was stopped."""
    caller = subprocess.Popen(
        [sys.executable, "-c", STOPPED_CALLER, script, str(tmp_path), *fake_torchrun(pids)], cwd=ROOT,
        env=dict(os.environ, PYTHONPATH=str(ROOT / "scripts")), stderr=subprocess.PIPE, text=True)
    log = tmp_path / "a.log"
    try:
        started = wait_for_pids(pids, 5)
        wait_for_text(log, "to stderr\n")  # on disk while the job runs
        caller.send_signal(signal.SIGTERM)
        _, err = caller.communicate(timeout=30)
    finally:
        caller.kill()
    assert caller.returncode == 128 + signal.SIGTERM, err
    assert_all_gone(started)
    head, output = log.read_text().split("\n\n", 1)
    assert "trainer.train" in head and "\n" not in head
    assert output == ("launched\nto stderr\n\nstopped from outside (SIGTERM, exit 143); the output above is "
                      "all it printed\n")


def test_compare_losses_reads_a_failed_runs_error_from_the_output_it_logged(tmp_path, monkeypatch):
    """With the output going to the log, the failure message still finds the rank's error line."""
    job = [sys.executable, "-c", "import sys; print('starting'); print('[rank0] error: run folder /x is in "
           "use', file=sys.stderr); sys.exit(1)"]
    monkeypatch.setattr(compare_losses, "run_group", lambda cmd, **kw: launch_group.run_group(job, **kw))
    with pytest.raises(RuntimeError) as exc:
        compare_losses.run("configs/debug.toml", [], 2, 2, tmp_path, "a", 60.0)
    assert str(exc.value).startswith(f"run a failed (exit 1); its whole output: {tmp_path / 'a.log'}\n"
                                     "the error:\n  error: run folder /x is in use\n")
    assert (tmp_path / "a.log").read_text().endswith("\n\nstarting\n[rank0] error: run folder /x is in use\n")


def _with_fake_torchrun(pids: Path):
    """run_group as the scripts call it, on the stand-in instead of the real torchrun command."""
    def run(cmd, **kwargs):
        return launch_group.run_group(fake_torchrun(pids), **{**kwargs, "grace": 1})
    return run


def test_compare_losses_timeout_is_one_line_naming_the_log(pids, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(compare_losses, "run_group", _with_fake_torchrun(pids))
    monkeypatch.setattr(compare_losses.tempfile, "mkdtemp", lambda prefix: str(tmp_path))
    rc = compare_losses.main(["--config", "configs/debug.toml", "--steps", "2", "--ngpu", "2",
                              "--common=--lr_scheduler.warmup_steps=1", "--timeout", "2"])
    out, err = capsys.readouterr()
    assert rc == 1
    assert err == f"error: run a timed out after 2 s (logs: {tmp_path / 'a.log'})\n"
    assert out == f"run folders and logs: {tmp_path}\n"  # said once, before the runs
    head, output = (tmp_path / "a.log").read_text().split("\n\n", 1)
    assert "trainer.train" in head  # the command, then all the run printed, then why it ended
    assert output == "launched\nto stderr\n\ntimed out after 2 s (--timeout)\n"
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))


def test_bench_train_timeout_costs_one_row_and_leaves_nothing(pids, tmp_path, monkeypatch):
    spec = importlib.util.spec_from_file_location("bench_train", ROOT / "scripts" / "bench_train.py")
    bench = importlib.util.module_from_spec(spec)
    sys.modules["bench_train"] = bench  # its dataclasses look their module up
    spec.loader.exec_module(bench)
    monkeypatch.setattr(bench, "run_group", _with_fake_torchrun(pids))
    res = bench.run_variant(bench.Variant(name="hung", config="configs/debug.toml", ngpu=2), 1, 1,
                            tmp_path, tmp_path, 2.0)
    assert not res.ok and res.error == "timed out after 2 s (--timeout)"
    assert "| hung | failed: timed out after 2 s (--timeout) |" in bench.table([res])
    head, output = (tmp_path / "hung.log").read_text().split("\n\n", 1)
    assert "trainer.train" in head
    assert output == "launched\nto stderr\n\ntimed out after 2 s (--timeout)\n"
    assert_all_gone(wait_for_pids(pids, 5, timeout=0))


def test_running_the_library_says_what_uses_it():
    res = subprocess.run([sys.executable, str(ROOT / "scripts" / "launch_group.py"), "--help"],
                         capture_output=True, text=True, timeout=60)
    assert res.returncode == 2 and res.stdout == ""
    assert res.stderr.count("\n") == 1 and res.stderr.startswith("scripts/launch_group.py is a library")
    assert "used by scripts/bench_train.py and scripts/compare_losses.py" in res.stderr
