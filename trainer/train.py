"""Entry point: `torchrun --nproc_per_node=N -m trainer.train --config C [--section.key=value ...]`.

Also runs as a plain `python -m trainer.train ...` (a 1-rank group).
"""

from __future__ import annotations

import os
import sys


def main(argv: list[str] | None = None) -> int:
    from trainer.preemption import PreemptionWatcher

    # First: a preemption signal during start-up (model build, checkpoint load, wandb: minutes on a
    # large model) is kept for the first step instead of ignored (SIGUSR1 inherited as ignored from
    # scripts/train.sh) or fatal (SIGTERM's default).
    preemption = PreemptionWatcher()
    from trainer.config import ConfigError, load_config, validate_config
    from trainer.parallel.dims import env_world_size

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = load_config(argv)
        # Fail on an impossible layout or batch here, before any process group is started.
        dims = validate_config(cfg, env_world_size())
    except (ConfigError, ValueError) as exc:
        preemption.close()
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from trainer.distributed import destroy_distributed
    from trainer.trainer import NonFiniteError, Trainer

    try:
        trainer = Trainer(cfg, dims, preemption=preemption)
    except (ValueError, RuntimeError, OSError) as exc:
        # Refusals of the start-up (data, checkpoint, run folder, device) carry messages that name
        # the key or file; a per-rank traceback would bury them.
        preemption.close()
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        destroy_distributed()
        return _stopped(exc, 2, "start-up")
    except BaseException:
        preemption.close()
        raise
    try:
        trainer.train()
        trainer.close()
        # Leave together: a rank that tears gloo down while another still finishes its last
        # collective makes that one abort ("terminate called without an active exception").
        import torch.distributed as dist

        dist.barrier()
    except NonFiniteError as exc:
        trainer.close()
        if os.environ.get("TITANKIT_TRACEBACK"):
            raise
        return _stopped(exc, 1, "training")
    except BaseException:
        trainer.close()
        raise
    finally:
        destroy_distributed()
    return 0


def _stopped(exc: BaseException, status: int, phase: str) -> int:
    """One line per rank for an error whose message says what to do; the traceback on request."""
    rank = os.environ.get("RANK", "0")
    print(f"[rank{rank}] error: {exc}\n[rank{rank}] ({phase} stopped, exit status {status}; "
          f"{type(exc).__name__}: TITANKIT_TRACEBACK=1 prints the traceback)", file=sys.stderr)
    return status


if __name__ == "__main__":
    sys.exit(main())
