"""Entry point: `torchrun --nproc_per_node=N -m trainer.train --config C [--section.key=value ...]`.

Also runs as a plain `python -m trainer.train ...` (a 1-rank group).
"""

from __future__ import annotations

import sys


def main(argv: list[str] | None = None) -> int:
    from trainer.config import ConfigError, load_config, validate_config
    from trainer.parallel.dims import env_world_size

    argv = sys.argv[1:] if argv is None else argv
    try:
        cfg = load_config(argv)
        # Fail on an impossible layout or batch here, before any process group is started.
        dims = validate_config(cfg, env_world_size())
    except (ConfigError, ValueError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2

    from trainer.distributed import destroy_distributed
    from trainer.trainer import Trainer

    trainer = Trainer(cfg, dims)
    try:
        trainer.train()
        trainer.close()
        # Leave together: a rank that tears gloo down while another still finishes its last
        # collective makes that one abort ("terminate called without an active exception").
        import torch.distributed as dist

        dist.barrier()
    except BaseException:
        trainer.close()
        raise
    finally:
        destroy_distributed()
    return 0


if __name__ == "__main__":
    sys.exit(main())
