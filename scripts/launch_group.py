"""Run a torchrun job with a timeout and never leave its processes behind.

`subprocess.run(cmd, timeout=...)` kills only the process it started. torchrun starts every rank in a
session of its own (start_new_session, torch.distributed.elastic's subprocess handler), so once
torchrun is gone the ranks are re-parented to PID 1 and go on training: on a GPU machine they keep the
GPUs, and every later job of a benchmark suite runs next to them or fails. run_group ends the whole
tree instead, on a timeout and on anything that stops the caller (an exception, Ctrl-C, SIGTERM):

1. while the job runs, look at torchrun's descendants every POLL_S and remember them: once torchrun
   is gone (ended by us, or killed from outside) the ranks have lost their parent and are found by
   their pids only;
2. SIGTERM to torchrun, which forwards it to the ranks (titankit ranks take it as a preemption: they
   finish the step and exit), and wait up to `grace` seconds, collecting processes started meanwhile;
3. SIGSTOP everything still alive in the tree until no new process appears (a stopped process cannot
   fork, so nothing slips out between the last look and the kill), then SIGKILL it all, and reap.

Used by scripts/bench_train.py and scripts/compare_losses.py. Linux reads /proc; elsewhere `ps`.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Sequence

POLL_S = 0.5  # how often the tree is looked at while the job runs (a /proc scan: milliseconds)
GRACE_S = 10.0  # a step of a big model on a busy machine takes seconds; a hung rank never finishes


class _Stopped(BaseException):
    """Raised in the main thread by SIGTERM/SIGHUP while a job runs (BaseException, like
    KeyboardInterrupt: no `except Exception` between here and the script may swallow it)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _raise_stopped(signum: int, frame: object) -> None:
    raise _Stopped(signum)


def _process_table() -> dict[int, tuple[int, str]]:
    """pid -> (parent pid, identity). The identity (start time on Linux) tells a process from a later
    one that got the same pid, so a pid collected earlier is never signalled once it is reused."""
    table: dict[int, tuple[int, str]] = {}
    if os.path.isdir("/proc/self"):
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                stat = Path(f"/proc/{entry}/stat").read_text()
            except OSError:  # exited while we looked
                continue
            # "pid (comm) state ppid ... starttime(22nd field)"; comm may hold spaces and ')'.
            fields = stat[stat.rindex(")") + 2:].split()
            if fields[0] == "Z":  # a zombie is dead already; its parent (or init) reaps it
                continue
            table[int(entry)] = (int(fields[1]), fields[19])
        return table
    out = subprocess.run(["ps", "-A", "-o", "pid=,ppid=,stat="], capture_output=True, text=True).stdout
    for line in out.splitlines():
        pid, ppid, state = line.split()[:3]
        if not state.startswith("Z"):
            table[int(pid)] = (int(ppid), "")
    return table


def _tree(roots: dict[int, str], table: dict[int, tuple[int, str]]) -> dict[int, str]:
    """The live members of `roots` (pid -> identity) and all their live descendants."""
    found = {pid: ident for pid, ident in roots.items() if pid in table and table[pid][1] == ident}
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    todo = list(found)
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in found:
                found[child] = table[child][1]
                todo.append(child)
    return found


def _signal_all(procs: dict[int, str], sig: int) -> None:
    for pid in procs:
        try:
            os.kill(pid, sig)
        except (ProcessLookupError, PermissionError):  # gone already, or (reused pid) not ours
            pass


def end_tree(proc: subprocess.Popen, known: dict[int, str] | None = None, grace: float = GRACE_S) -> None:
    """End `proc` and every process below it (plus `known`, pid -> identity, collected earlier: the
    ranks of a torchrun that died are no longer below it): SIGTERM, up to `grace` s, then SIGKILL."""
    table = _process_table()
    known = dict(known or {})
    # Only while unreaped: once proc.poll() has reaped it, its pid may already be someone else's.
    if proc.poll() is None and proc.pid in table:
        known[proc.pid] = table[proc.pid][1]
    known.update(_tree(known, table))
    try:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)  # torchrun forwards it to its ranks
        else:  # torchrun is gone: tell what it left behind directly
            _signal_all(_tree(known, table), signal.SIGTERM)
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            # Keep collecting: a rank may start a process (a compile worker) while it winds down.
            alive = _tree(known, _process_table())
            known.update(alive)
            if not alive:
                break
            time.sleep(0.1)
    except (KeyboardInterrupt, _Stopped):  # asked again while waiting: stop waiting, kill now
        pass
    # Nothing may interrupt the kill itself (a second Ctrl-C here would leave the ranks running);
    # a signal that arrives now is delivered once the mask is restored.
    main = threading.current_thread() is threading.main_thread()
    old_mask = (signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT, signal.SIGTERM, signal.SIGHUP})
                if main else None)
    try:
        while True:
            alive = _tree(known, _process_table())
            new = any(pid not in known for pid in alive)
            _signal_all(alive, signal.SIGSTOP)
            known.update(alive)
            if not new:  # all stopped, and none forked since the look before
                break
        _signal_all(_tree(known, _process_table()), signal.SIGKILL)
        proc.wait()  # reap torchrun, our child; the re-parented ranks are reaped by init
        deadline = time.monotonic() + 5.0
        while _tree(known, _process_table()) and time.monotonic() < deadline:
            time.sleep(0.05)  # SIGKILL is delivered asynchronously; return once they are gone
    finally:
        if old_mask is not None:
            signal.pthread_sigmask(signal.SIG_SETMASK, old_mask)


def stop_reason(exc: BaseException) -> str:
    """What stopped a caller of run_group, for a log line: 'SIGTERM, exit 143' or 'Ctrl-C'."""
    if isinstance(exc, SystemExit) and isinstance(exc.code, int) and exc.code > 128:
        return f"{signal.Signals(exc.code - 128).name}, exit {exc.code}"
    return "Ctrl-C" if isinstance(exc, KeyboardInterrupt) else f"{type(exc).__name__} {exc}"


def _read(f, start: int = 0) -> str:
    f.seek(start)
    # What subprocess.run(text=True) would give, without failing on a stray byte of a dying rank.
    return f.read().decode(errors="replace").replace("\r\n", "\n")


def _output_files(files: contextlib.ExitStack, log: str | os.PathLike | None):
    """(stdout, stderr) for Popen and a function giving (stdout, stderr) as printed so far.

    With `log`: both go, merged in the order printed, straight into that file after what it already
    holds (the caller's header), so the output is on disk while the job runs and survives whatever
    stops the caller; what is read back is the part after the header. Without: two temporary files."""
    if log is None:
        out, err = (files.enter_context(tempfile.TemporaryFile()) for _ in range(2))
        return out, err, lambda: (_read(out), _read(err))
    # Append mode: every write of the job lands at the end, whatever the offset _read leaves behind.
    out = files.enter_context(open(log, "a+b"))
    start = out.seek(0, os.SEEK_END)
    return out, subprocess.STDOUT, lambda: (_read(out, start), "")


def run_group(cmd: Sequence[str], *, timeout: float, cwd: str | os.PathLike | None = None,
              env: dict[str, str] | None = None, grace: float = GRACE_S,
              log: str | os.PathLike | None = None) -> subprocess.CompletedProcess:
    """subprocess.run(cmd, capture_output=True, text=True, timeout=timeout), but a timeout or anything
    that stops the caller ends the whole process tree first (see the module docstring).

    Raises subprocess.TimeoutExpired (its output and stderr are what the job printed, as str) once the
    tree is gone; SIGTERM or SIGHUP to the caller end the tree, then raise SystemExit(128 + signal);
    an exception or KeyboardInterrupt ends the tree and propagates.

    log: a file the job's stdout and stderr are appended to as it prints them (merged, as a terminal
    shows them), after whatever the caller wrote there first; a job stopped from outside then leaves
    its output behind. The returned stdout (and TimeoutExpired's) is that output, stderr is "".
    """
    handlers = {}
    if threading.current_thread() is threading.main_thread():
        for sig in (signal.SIGTERM, signal.SIGHUP):
            # Only the default action (die at once, the ranks left running) is replaced: an ignored
            # SIGHUP (nohup) or a handler of the caller's stays as it is.
            if signal.getsignal(sig) == signal.SIG_DFL:
                handlers[sig] = signal.signal(sig, _raise_stopped)
    # Files, not pipes: a full pipe would block a rank that prints while it winds down, and a
    # process that escaped could hold a pipe open forever; a file cannot do either.
    with contextlib.ExitStack() as files:
        try:
            out, err, printed = _output_files(files, log)
            proc = subprocess.Popen(list(cmd), cwd=cwd, env=env, stdin=subprocess.DEVNULL,
                                    stdout=out, stderr=err)
            known: dict[int, str] = {}  # every process seen below torchrun, pid -> identity
            try:
                deadline = time.monotonic() + timeout
                while (code := proc.poll()) is None:
                    if time.monotonic() >= deadline:
                        end_tree(proc, known, grace)
                        stdout, stderr = printed()
                        raise subprocess.TimeoutExpired(list(cmd), timeout, output=stdout, stderr=stderr)
                    # Collected while the job runs, so the ranks are known even if torchrun dies first
                    # (killed from outside) and they lose their parent.
                    table = _process_table()
                    known.update(_tree({proc.pid: table[proc.pid][1]} if proc.pid in table else {}, table))
                    known.update(_tree(known, table))
                    try:  # returns as soon as torchrun exits
                        proc.wait(timeout=min(POLL_S, max(0.0, deadline - time.monotonic())))
                    except subprocess.TimeoutExpired:
                        pass
            except subprocess.TimeoutExpired:
                raise
            except BaseException:
                end_tree(proc, known, grace)
                raise
            if _tree(known, _process_table()):  # torchrun ended but not all of its ranks
                end_tree(proc, known, grace)
            return subprocess.CompletedProcess(list(cmd), code, *printed())
        except _Stopped as stop:
            print(f"stopped by {signal.Signals(stop.signum).name}; the job and all its processes were "
                  "ended", file=sys.stderr, flush=True)
            raise SystemExit(128 + stop.signum) from None
        finally:
            for sig, old in handlers.items():
                signal.signal(sig, old)


if __name__ == "__main__":  # a library: running it would otherwise print nothing and exit 0
    print("scripts/launch_group.py is a library (run_group: a torchrun job with a timeout that leaves no "
          "process behind), used by scripts/bench_train.py and scripts/compare_losses.py; run one of those",
          file=sys.stderr)
    sys.exit(2)
