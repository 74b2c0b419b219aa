"""Process-group start-up: more ranks per node than visible GPUs is named before CUDA or NCCL fail."""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from trainer.config.schema import Comm
from trainer.distributed import init_distributed


def test_a_local_rank_without_its_gpu_is_named_with_the_ways_out(monkeypatch, tmp_path):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(torch.cuda, "set_device", lambda d: pytest.fail("must stop before set_device"))
    monkeypatch.setattr(dist, "init_process_group", lambda *a, **k: pytest.fail("must stop before the group"))
    monkeypatch.setenv("RANK", "1")
    monkeypatch.setenv("LOCAL_RANK", "1")
    monkeypatch.setenv("WORLD_SIZE", "2")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3")
    with pytest.raises(RuntimeError) as err:
        init_distributed(Comm(), str(tmp_path))
    msg = str(err.value)
    for part in ("rank 1", "LOCAL_RANK=1", "shows 1 CUDA device", "CUDA_VISIBLE_DEVICES='3'",
                 "--nproc_per_node=1", "NGPU=1", "(CUDA_VISIBLE_DEVICES=) to train on CPU", "scripts/multinode.sbatch"):
        assert part in msg, (part, msg)
