"""A world of one gloo rank in the test process, for unit tests of code that needs a process group
(FSDP2 on one rank, DCP)."""

from __future__ import annotations

import contextlib
import socket

import torch.distributed as dist


@contextlib.contextmanager
def one_rank_group():
    """Initialise a 1-rank gloo group unless one exists (then reuse it); destroy only our own."""
    if dist.is_initialized():
        yield
        return
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", store=dist.TCPStore("127.0.0.1", port, 1, is_master=True),
                            rank=0, world_size=1)
    try:
        yield
    finally:
        dist.destroy_process_group()


_RANK_ENV = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@contextlib.contextmanager
def in_process_trainer_env(monkeypatch):
    """For a Trainer built in the test process: no inherited rank variables going in (the Trainer
    then starts a 1-rank group itself); its group and the variables it set are gone coming out."""
    import os

    from trainer.distributed import destroy_distributed

    for key in _RANK_ENV:
        monkeypatch.delenv(key, raising=False)
    try:
        yield
    finally:
        destroy_distributed()
        for key in _RANK_ENV:
            os.environ.pop(key, None)


def tiny_trainer_args(tmp_path) -> list[str]:
    """Command-line overrides for a Trainer that builds and steps in about a second on CPU: a 1-layer
    debug Llama, 16-token samples, its outputs and the tokenized corpus under tmp_path."""
    return ["--model.overrides.n_layers=1", "--model.overrides.dim=32", "--model.overrides.n_heads=2",
            "--model.overrides.n_kv_heads=1", "--training.seq_len=16", "--training.local_batch_size=2",
            "--lr_scheduler.warmup_steps=1", "--metrics.log_freq=1", f"--run.dump_folder={tmp_path}",
            f"--data.cache_dir={tmp_path / 'cache'}"]
