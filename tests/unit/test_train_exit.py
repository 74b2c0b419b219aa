"""How `python -m trainer.train` ends its process (trainer.train.leave: why, in its docstring).

leave() skips the interpreter's teardown, where a gloo worker thread can abort a finished run; these
tests hold it to the rest of a normal exit (the status, other threads joined, atexit handlers run,
output flushed) and the second Ctrl-C's exit to at once.
"""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import atexit, sys, threading, time
    from trainer.train import leave
    atexit.register(lambda: print("atexit handler ran", flush=True))
    def late():
        time.sleep(0.3)
        print("thread finished", flush=True)
    threading.Thread(target=late).start()  # not a daemon: a normal exit waits for it
    sys.stdout.write("buffered, no newline")  # a pipe is block-buffered: only a flush shows it
    sys.stderr.write("stderr line")
    leave(int(sys.argv[1]))
    print("after leave", flush=True)
""")


def _run(status: int) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", SCRIPT, str(status)], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_leave_keeps_the_status_joins_threads_runs_atexit_and_flushes():
    proc = _run(2)
    assert proc.returncode == 2
    assert proc.stdout.index("thread finished") < proc.stdout.index("atexit handler ran")
    assert "buffered, no newline" in proc.stdout
    assert "after leave" not in proc.stdout
    assert proc.stderr == "stderr line"


def test_leave_stops_idle_thread_pool_workers_instead_of_waiting_on_them():
    # An executor's workers idle on its queue until threading's exit hooks tell them to stop (a
    # compiled run's inductor pool is one): leave() must end such a process as Python's exit does.
    script = textwrap.dedent("""
        import atexit
        from concurrent.futures import ThreadPoolExecutor
        from trainer.train import leave
        atexit.register(lambda: print("atexit handler ran", flush=True))
        pool = ThreadPoolExecutor(2)
        print(pool.submit(lambda: 6 * 7).result(), flush=True)
        leave(0)
    """)
    proc = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True,
                          timeout=60)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "42\natexit handler ran\n"


def test_a_second_ctrl_c_leaves_at_once():
    from trainer.train import INTERRUPTED

    proc = _run(INTERRUPTED)
    assert proc.returncode == INTERRUPTED == 130
    assert "buffered, no newline" in proc.stdout  # what was printed still shows
    assert "atexit handler ran" not in proc.stdout and "thread finished" not in proc.stdout


RAISING = textwrap.dedent("""
    import atexit, sys
    from trainer.train import run_and_leave
    atexit.register(lambda: print("atexit handler ran", flush=True))
    def entry(kind):
        if kind == "error":
            raise RuntimeError("the run failed here")
        if kind == "ctrl-c":
            raise KeyboardInterrupt
        if kind == "exit":
            sys.exit(3)
        return 0
    run_and_leave(entry, sys.argv[1])
""")


def _raise(kind: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", RAISING, kind], cwd=ROOT, capture_output=True,
                          text=True, timeout=60)


def test_an_exception_out_of_the_entry_prints_its_traceback_and_exits_1_through_leave():
    proc = _raise("error")
    assert proc.returncode == 1
    assert "Traceback (most recent call last)" in proc.stderr
    assert "RuntimeError: the run failed here" in proc.stderr
    assert "atexit handler ran" in proc.stdout  # leave()'s normal exit, not the second Ctrl-C's


def test_a_keyboard_interrupt_out_of_the_entry_leaves_at_once_and_sys_exit_keeps_its_status():
    from trainer.train import INTERRUPTED

    proc = _raise("ctrl-c")
    assert proc.returncode == INTERRUPTED
    assert "KeyboardInterrupt" in proc.stderr and "atexit handler ran" not in proc.stdout
    assert _raise("exit").returncode == 3
    ok = _raise("ok")
    assert ok.returncode == 0 and "atexit handler ran" in ok.stdout
