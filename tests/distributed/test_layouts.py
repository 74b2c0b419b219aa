"""Every parallel layout trains the same model: losses and gradients match the 1-rank run.

Each layout runs the real Trainer in a gloo world (CPU, fp32, deterministic, fixed seed) on a tiny
4-layer Llama for 5 steps with the same global batch of 8 sequences per step (the data stream is
world-size independent). Acceptance (issue 4): the 5 losses within 1e-5 relative of the 1-rank run,
the step-1 gradients (clipped, as they stay on the parameters after the step) per parameter within
1e-4 relative (max-abs error over max-abs value), DTensor gradients gathered with full_tensor().
"""

from __future__ import annotations


import pytest
import torch
import torch.distributed as dist

from tests.distributed.test_context_parallel import spawn_world
from tests.helpers.compare import assert_matches_single_rank, full_grads
from tests.helpers.layout_runs import LayoutRuns

pytestmark = pytest.mark.slow

STEPS = 5
# Tiny model: 4 heads / 2 KV heads (tp=2 divides both), seq 32 divisible by 2 x cp x tp = 8.
BASE = [
    "--model.flavor=debug",
    "--model.attention=sdpa",
    "--model.overrides.dim=64",
    "--model.overrides.n_layers=4",
    "--model.overrides.n_heads=4",
    "--model.overrides.n_kv_heads=2",
    "--model.overrides.vocab_size=512",
    "--training.seq_len=32",
    "--training.global_batch_size=8",
    f"--training.steps={STEPS}",
    "--training.mixed_precision_param=float32",
    "--run.seed=7",
    "--run.deterministic",
    "--optimizer.lr=3e-3",
    "--lr_scheduler.warmup_steps=1",
    "--metrics.log_freq=1000",
]

# name -> (world size, overrides)
LAYOUTS = {
    "dp_shard2": (2, ["--parallelism.data_parallel_shard_degree=2"]),
    "dp_rep2_shard2": (4, ["--parallelism.data_parallel_replicate_degree=2",
                           "--parallelism.data_parallel_shard_degree=2"]),
    "tp2": (2, ["--parallelism.tensor_parallel_degree=2"]),
    "dp_shard2_tp2": (4, ["--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.tensor_parallel_degree=2"]),
    "cp2_ring": (2, ["--parallelism.context_parallel_degree=2",
                     "--parallelism.context_parallel_method=ring"]),
    "cp2_allgather": (2, ["--parallelism.context_parallel_degree=2",
                          "--parallelism.context_parallel_method=allgather"]),
    "dp_shard2_cp2": (4, ["--parallelism.data_parallel_shard_degree=2",
                          "--parallelism.context_parallel_degree=2"]),
    "tp2_cp2": (4, ["--parallelism.tensor_parallel_degree=2",
                    "--parallelism.context_parallel_degree=2"]),
    "dp_shard2_tp2_cp2": (8, ["--parallelism.data_parallel_shard_degree=2",
                              "--parallelism.tensor_parallel_degree=2",
                              "--parallelism.context_parallel_degree=2"]),
    # Beyond the list: pure HSDP replication, the other TP output layout, per-block compile
    # under TP, and activation checkpointing composed with CP's autograd.Functions and with TP/FSDP
    # (recomputation must not change a gradient).
    "dp_rep2": (2, ["--parallelism.data_parallel_replicate_degree=2",
                    "--parallelism.data_parallel_shard_degree=1"]),
    "tp2_replicated_logits": (2, ["--parallelism.tensor_parallel_degree=2",
                                  "--parallelism.enable_loss_parallel=false"]),
    "tp2_compile": (2, ["--parallelism.tensor_parallel_degree=2", "--compile.enable"]),
    "cp2_ring_ac_op": (2, ["--parallelism.context_parallel_degree=2",
                           "--activation_checkpoint.mode=selective",
                           "--activation_checkpoint.selective_ac_option=op"]),
    "cp2_allgather_ac_full": (2, ["--parallelism.context_parallel_degree=2",
                                  "--parallelism.context_parallel_method=allgather",
                                  "--activation_checkpoint.mode=full"]),
    "dp_shard2_tp2_ac_every2": (4, ["--parallelism.data_parallel_shard_degree=2",
                                    "--parallelism.tensor_parallel_degree=2",
                                    "--activation_checkpoint.mode=selective",
                                    "--activation_checkpoint.selective_ac_option=2",
                                    "--parallelism.fsdp_reshard_after_forward=always"]),
    # FSDP all-gathers two blocks ahead in forward and two behind in backward.
    "dp_shard2_prefetch2": (2, ["--parallelism.data_parallel_shard_degree=2", "--parallelism.fsdp_prefetch=2"]),
    # Gradient accumulation (local batch 1 of the global 8) with gradients reduced once per step:
    # HSDP's all-reduce across replicas is skipped with the reduce-scatters until the last micro-batch,
    # and the parameters stay gathered from the first micro-batch's forward to the last's backward.
    "dp_rep2_shard2_accum2_sync_last_keep": (4, ["--parallelism.data_parallel_replicate_degree=2",
                                                 "--parallelism.data_parallel_shard_degree=2",
                                                 "--training.local_batch_size=1",
                                                 "--parallelism.fsdp_grad_sync=last_micro_batch",
                                                 "--parallelism.fsdp_reshard_after_backward=last_micro_batch"]),
}


def _train_all(rank: int, world: int, jobs: list[tuple[str, list[str], str]]) -> None:
    """Run every (name, argv, out_file) job in this world, one after the other (process start-up, mostly
    importing torch, costs more than the training itself)."""
    from trainer.config import load_config
    from trainer.trainer import Trainer

    torch.use_deterministic_algorithms(True)
    for _name, argv, out_file in jobs:
        trainer = Trainer(load_config(argv))
        losses, grads = [], {}
        for step in range(STEPS):
            losses.append(trainer.train_step())
            if step == 0:
                grads = full_grads(trainer.model)
        trainer.close()
        if dist.get_rank() == 0:
            torch.save({"losses": losses, "grads": grads}, out_file)
        dist.barrier()


@pytest.fixture(scope="module")
def results(tmp_path_factory) -> LayoutRuns:
    return LayoutRuns(tmp_path_factory.mktemp("layouts"), LAYOUTS, BASE, _train_all, spawn_world)


@pytest.mark.parametrize("layout", list(LAYOUTS))
def test_layout_matches_single_rank(layout: str, results: LayoutRuns) -> None:
    reference = results.get("single")
    got = results.get(layout)
    assert_matches_single_rank(layout, got, reference)
