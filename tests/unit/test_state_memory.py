"""The start-up check that each rank's training state (parameters, gradients, AdamW moments) fits:
a state that cannot fit stops every rank with its sizes, before any of it is allocated."""

from __future__ import annotations

import torch
import torch.nn as nn

from trainer.state_memory import GiB, RankMemory, shortfall, state_bytes


def test_state_bytes_counts_four_copies_of_each_trained_local_shard():
    with torch.device("meta"):
        model = nn.Sequential(nn.Linear(4, 8), nn.Linear(8, 2, bias=False).to(torch.bfloat16))
    # fp32 Linear: 40 elements x 4 bytes; bf16 Linear: 16 elements x 2 bytes; four copies of each.
    assert state_bytes(model) == 4 * (40 * 4 + 16 * 2)
    model[1].weight.requires_grad_(False)  # frozen: no gradient, no moments
    assert state_bytes(model) == 4 * 40 * 4 + 16 * 2


def test_state_bytes_of_an_fsdp_sharded_model_is_the_local_shard():
    from torch.distributed.fsdp import fully_shard

    from tests.helpers.one_rank import one_rank_group

    with one_rank_group():
        with torch.device("meta"):
            model = nn.Linear(6, 6)
        fully_shard(model)
        assert type(model.weight).__name__ == "DTensor"
        assert state_bytes(model) == 4 * 42 * 4  # one rank holds every row


def row(rank, host, device, need_gib, available_gib):
    return RankMemory(rank, host, device, int(need_gib * GiB),
                      None if available_gib is None else int(available_gib * GiB))


def test_cpu_ranks_of_one_host_share_its_memory():
    shared = [row(0, "a", "cpu", 6, 10), row(1, "a", "cpu", 6, 11)]
    msg = shortfall(shared)
    assert msg is not None and msg.startswith(
        "the training state does not fit: the 2 CPU rank(s) on a need at least 12.0 GiB together for "
        "their shards of the parameters, gradients and AdamW moments, but the host has 11.0 GiB "
        "available (MemAvailable; swap not counted). More ranks on one host share its RAM")
    assert msg.endswith("or train a smaller model (e.g. --model.overrides.n_layers=N). Activations need "
                        "memory on top of this state")
    assert shortfall([row(0, "a", "cpu", 6, 10), row(1, "b", "cpu", 6, 10)]) is None  # two hosts
    assert shortfall([row(0, "a", "cpu", 60, None), row(1, "a", "cpu", 60, None)]) is None  # unknown


def test_the_worst_gpu_rank_is_named_and_a_fitting_layout_passes():
    rows = [row(0, "n0", "cuda:0", 70, 139), row(1, "n0", "cuda:1", 150, 139), row(2, "n1", "cuda:0", 300, 100)]
    msg = shortfall(rows)
    assert msg is not None and ("rank 2 (n1, cuda:0) needs at least 300.0 GiB for its shards of the "
                                "parameters, gradients and AdamW moments, but the GPU has 100.0 GiB free. "
                                "Shard the model over more GPUs (parallelism.data_parallel_shard_degree, "
                                "tensor_parallel_degree)") in msg
    assert shortfall([row(0, "n0", "cuda:0", 70, 139), row(1, "n0", "cuda:1", 0.1, 0)]) is not None
    assert shortfall([row(0, "n0", "cuda:0", 139, 139)]) is None  # a lower bound: equal still passes


def test_a_model_too_large_for_the_host_stops_start_up_on_every_rank(tmp_path, monkeypatch, capsys):
    """Was the kernel's OOM killer on CPU (torchrun: exitcode -9, no message) once the weights
    were materialised; now refused with the sizes before any weight exists."""
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    monkeypatch.setattr("trainer.state_memory.mem_available", lambda: 4096)
    with in_process_trainer_env(monkeypatch):
        assert main([*tiny_trainer_args(tmp_path), "--training.steps=1"]) == 2
    err = capsys.readouterr().err
    assert "[rank0] error: the training state does not fit: the 1 CPU rank(s) on " in err
    assert "GiB available (MemAvailable; swap not counted)" in err and "Traceback" not in err
