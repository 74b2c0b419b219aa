"""Entry point: `torchrun --nproc_per_node=N -m trainer.train --config C [--section.key=value ...]`.

Also runs as a plain `python -m trainer.train ...` (a 1-rank group).
"""

from __future__ import annotations

import contextlib
import os
import sys
from typing import NoReturn

INTERRUPTED = 128 + 2  # 128 + SIGINT, as a shell reports a command that Ctrl-C ended


def main(argv: list[str] | None = None) -> int:
    from trainer.preemption import PreemptionWatcher, end_with_the_launcher

    end_with_the_launcher()
    # First: a preemption signal during start-up (model build, checkpoint load, wandb: minutes on a
    # large model) is kept for the first step instead of ignored (SIGUSR1 inherited as ignored from
    # scripts/train.sh) or fatal (SIGTERM's default). A Ctrl-C raises KeyboardInterrupt until the
    # loop starts, and again at the second one (trainer/preemption.py).
    preemption = PreemptionWatcher()
    try:
        return _run(sys.argv[1:] if argv is None else argv, preemption)
    except KeyboardInterrupt:
        preemption.close()
        return _interrupted("at once: nothing more is saved" if preemption.training
                            else "during start-up: this launch trained nothing")


def _run(argv: list[str], preemption) -> int:
    from trainer.config import ConfigError, load_config, validate_config
    from trainer.parallel.dims import env_world_size

    try:
        with _config_warnings_logged():
            cfg = load_config(argv)
            # Fail on an impossible layout or batch here, before any process group is started.
            dims = validate_config(cfg, env_world_size())
    except (ConfigError, ValueError) as exc:
        preemption.close()
        # Every rank reads the same files and command line: one line per node, not one per rank
        # (a bare torchrun; scripts/train.sh checks the config before starting any rank).
        if os.environ.get("LOCAL_RANK", "0") == "0":
            print(f"error: {exc}", file=sys.stderr)
        return 2

    from trainer.checkpoint_errors import CheckpointWriteError
    from trainer.distributed import destroy_distributed, peer_failure
    from trainer.trainer import NonFiniteError, Trainer

    try:
        trainer = Trainer(cfg, dims, preemption=preemption)
    except (ValueError, RuntimeError, OSError, ImportError) as exc:
        # Refusals of the start-up (data, checkpoint, run folder, device, a missing package) carry
        # messages that name the key or file; a per-rank traceback would bury them. A rank that
        # met another rank's refusal in a collective says so (peer_failure).
        preemption.close()
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        destroy_distributed()
        why = peer_failure(exc, "start-up")
        return report_stop(exc if why is None else RuntimeError(why), 2, "start-up")
    except BaseException:
        preemption.close()
        destroy_distributed()
        raise
    try:
        trainer.train()
        trainer.close()
        # Leave together: a rank that tears gloo down while another still finishes its last
        # collective makes that one abort ("terminate called without an active exception").
        import torch.distributed as dist

        dist.barrier()
    except KeyboardInterrupt:
        # A second Ctrl-C: stop now. close() would wait for a checkpoint write in flight, and so
        # would the interpreter's exit (its thread is joined): __main__ leaves with os._exit.
        preemption.close()
        done = getattr(trainer, "completed_step", trainer.step)
        return _interrupted(f"after step {done}: {_relaunch_note(trainer, 'nothing is saved')}")
    except NonFiniteError as exc:
        trainer.close()  # first: it finishes a checkpoint write in flight, which the note counts
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        # Where "relaunch to resume from the last checkpoint" actually continues, if anywhere.
        note = _relaunch_note(trainer, "a relaunch starts over at step 0")
        return report_stop(NonFiniteError(f"{exc} Here {note}."), 1, "training")
    except CheckpointWriteError as exc:
        # Every rank has the same failure (DCP reports it to all); the message names the newest
        # complete checkpoint. A failure of the last async write surfaces in close(): the second
        # close() finishes what the first left undone.
        trainer.close()
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        return report_stop(exc, 1, "training")
    except BaseException as exc:
        trainer.close()
        # A collective that failed because another rank stopped or hung: that rank's error is the
        # cause, so this one gets a line saying so, not a traceback that reads as its own failure.
        why = peer_failure(exc, f"step {trainer.step}")
        if why is None or os.environ.get("TITANKIT_TRACEBACK"):
            raise
        return report_stop(RuntimeError(why), 1, "training")
    finally:
        destroy_distributed()
    return 0


@contextlib.contextmanager
def _config_warnings_logged():
    """The config's warnings (rank 0's, once each: trainer/config/checks.py) as log lines, not as
    Python's `path:line: UserWarning:` with a source line; other warnings as Python shows them."""
    import warnings

    from trainer.log import init_logging, logger

    with warnings.catch_warnings(record=True) as caught:
        try:
            yield
        finally:
            config_dir = os.path.dirname(os.path.abspath(__file__)) + os.sep + "config" + os.sep
            for w in caught:
                if w.category is UserWarning and w.filename.startswith(config_dir):
                    init_logging()
                    logger.warning(str(w.message))
                else:
                    warnings.showwarning(w.message, w.category, w.filename, w.lineno)


def _relaunch_note(trainer, unsaved: str) -> str:
    """Where a relaunch continues after the last completed step; `unsaved` for a run without
    checkpoints."""
    if trainer.checkpointer is None:
        return f"checkpoint.enable is false: {unsaved}"
    return trainer.checkpointer.relaunch_note(getattr(trainer, "completed_step", trainer.step))


def _interrupted(what: str) -> int:
    """One line per node for a Ctrl-C that stops at once."""
    from trainer.preemption import say_once_per_node

    sys.stderr.flush()  # after what is already buffered there
    say_once_per_node(f"stopped by Ctrl-C {what}")
    return INTERRUPTED


def report_stop(exc: BaseException, status: int, phase: str) -> int:
    """Print the per-rank stop of an entry point for an error whose message says what to do, and
    return `status` to exit with: `[rankN] error: <message>`, then which `phase` stopped with what
    status and that TITANKIT_TRACEBACK=1 prints the traceback (the caller re-raises when it is set).
    Public for the scripts that start a Trainer as train.py does (scripts/bench_checkpoint.py), so
    their refusals read the same."""
    rank = os.environ.get("RANK", "0")
    print(f"[rank{rank}] error: {exc}\n[rank{rank}] ({phase} stopped, exit status {status}; "
          f"{type(exc).__name__}: TITANKIT_TRACEBACK=1 prints the traceback)", file=sys.stderr)
    return status


def leave(status: int) -> NoReturn:
    """End the process with `status` after main() returned, without the interpreter's teardown.

    dist.barrier() returns once gloo marks the barrier done, but gloo's worker thread destroys that
    work only afterwards, and with it the works it waited on, whose tensors have Python objects: it
    takes the GIL to drop them. If the main thread is already finalizing by then, Python ends the
    worker with pthread_exit inside that (noexcept) destructor, and the process aborts ("terminate
    called without an active exception", SIGABRT) after a run that had finished: torchrun reports it
    failed. Seen in CI (2026-12-05); a 2-rank DTensor program on gloo (barrier, then
    destroy_process_group, which frees nothing while DTensor's caches hold the meshes, and a mesh
    its process groups) aborted so in 6 of 131 exits, a core dump showing the trace above, and in
    none of 140 through this function (2 CPU cores, torch 2.13). So this does what Python's own
    exit does before the teardown, in its order (other non-daemon threads joined, then the atexit
    handlers: logging's flush, wandb's, inductor's worker pool), flushes stdout and stderr, and
    leaves with os._exit. A second Ctrl-C (INTERRUPTED) leaves at once: no thread joined, no
    handler run.

    The threads are joined by threading._shutdown, as the interpreter does, not by joining each
    one: it first runs threading's own exit hooks, where concurrent.futures tells its pools' idle
    workers to stop. A plain join waits on such a worker forever: a compiled run with a cold
    inductor cache finished its steps and then hung here (CPU, torch 2.13, 2026-12-05; not with
    TORCHINDUCTOR_COMPILE_THREADS=1, which starts no compile pool).
    """
    import atexit
    import threading

    if status != INTERRUPTED:
        threading._shutdown()  # private but in every CPython 3: hooks, then non-daemon joins
        atexit._run_exitfuncs()  # private but in every CPython 3: the handlers, as at a normal exit
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):  # a closed or broken pipe must not cost the status
            stream.flush()
    os._exit(status)


def run_and_leave(entry, *args) -> NoReturn:
    """leave() with entry(*args)'s status. An exception out of it is printed as Python prints it and
    leaves with status 1, as an uncaught exception does, so a failed run's exit skips the teardown
    too (an abort there would turn its status 1 into SIGABRT). SystemExit keeps its own status
    (argparse's --help and usage errors); a KeyboardInterrupt leaves at once with INTERRUPTED."""
    try:
        status = entry(*args)
    except SystemExit:
        raise
    except BaseException as exc:
        sys.excepthook(*sys.exc_info())
        leave(INTERRUPTED if isinstance(exc, KeyboardInterrupt) else 1)
    leave(status)


if __name__ == "__main__":
    run_and_leave(main)
