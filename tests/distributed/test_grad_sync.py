"""parallelism.fsdp_grad_sync = last_micro_batch (or every_2_micro_batches): with gradient
accumulation, FSDP reduces once per step (twice) instead of once per micro-batch, and training is
unchanged.

Two gloo ranks (CPU, fp32, deterministic) train the same tiny Llama several ways on the same global
batch of 8 sequences: local batch 4 (no accumulation), local batch 1 x 4 micro-batches reducing
after each, and the same reducing only after the last (after every second). All must agree (losses
1e-5, step-1 gradients 1e-4 relative), and the last one must issue a quarter of the reduce-scatters
(half). The same holds for keeping the parameters unsharded between micro-batches, with a quarter
of the all-gathers.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed.test_context_parallel import spawn_world
from tests.distributed.test_layouts import BASE, STEPS
from tests.helpers.compare import assert_matches_single_rank, full_grads

pytestmark = pytest.mark.slow

RUNS = {
    "no_accum": ["--training.local_batch_size=4"],
    "accum4_every": ["--training.local_batch_size=1"],
    "accum4_last": ["--training.local_batch_size=1", "--parallelism.fsdp_grad_sync=last_micro_batch"],
    "accum4_every2": ["--training.local_batch_size=1", "--parallelism.fsdp_grad_sync=every_2_micro_batches"],
    "accum4_never": ["--training.local_batch_size=1", "--parallelism.fsdp_reshard_after_forward=never"],
    "accum4_keep": ["--training.local_batch_size=1", "--parallelism.fsdp_reshard_after_forward=never",
                    "--parallelism.fsdp_reshard_after_backward=last_micro_batch"],
    "accum4_keep_default": ["--training.local_batch_size=1",
                            "--parallelism.fsdp_reshard_after_backward=last_micro_batch"],
}
REDUCE_SCATTERS = ("reduce_scatter_tensor", "reduce_scatter_single")  # whichever this torch's FSDP2 calls
ALL_GATHERS = ("all_gather_into_tensor", "all_gather_single")  # torch 2.11 | newer


def _count_calls(counter: list[int], names: tuple[str, ...]) -> None:
    for name in names:
        fn = getattr(dist, name, None)
        if fn is None:
            continue

        def counting(*args, _fn=fn, **kwargs):
            counter[0] += 1
            return _fn(*args, **kwargs)

        setattr(dist, name, counting)


def _train(rank: int, world: int, out_file: str, dump: str) -> None:
    from trainer.config import load_config
    from trainer.trainer import Trainer

    torch.use_deterministic_algorithms(True)
    counter, gathers = [0], [0]
    _count_calls(counter, REDUCE_SCATTERS)
    _count_calls(gathers, ALL_GATHERS)
    results = {}
    for name, overrides in RUNS.items():
        trainer = Trainer(load_config([*BASE, "--parallelism.data_parallel_shard_degree=2", *overrides,
                                       f"--run.dump_folder={dump}", f"--run.name={name}"]))
        before, gathered, losses, grads = counter[0], gathers[0], [], {}
        for step in range(STEPS):
            losses.append(trainer.train_step())
            if step == 0:
                grads = full_grads(trainer.model)
        results[name] = {"losses": losses, "grads": grads, "reduce_scatters": counter[0] - before,
                         "all_gathers": gathers[0] - gathered,
                         "accum": trainer.grad_accum}
        trainer.close()
    if rank == 0:
        torch.save(results, out_file)
    dist.barrier()


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    """All runs of RUNS, trained once for the tests of this file."""
    tmp = tmp_path_factory.mktemp("grad_sync")
    spawn_world(2, _train, str(tmp / "results.pt"), str(tmp))
    return torch.load(tmp / "results.pt")


def test_reducing_after_the_last_micro_batch_trains_the_same_with_fewer_collectives(res):
    assert [res[n]["accum"] for n in RUNS] == [1] + [4] * (len(RUNS) - 1)
    for name in RUNS:
        if name == "no_accum":
            continue
        assert_matches_single_rank(name, res[name], res["no_accum"])
    every, last = res["accum4_every"]["reduce_scatters"], res["accum4_last"]["reduce_scatters"]
    assert every > 0, "no reduce-scatter was seen: the counter does not see this torch's FSDP2"
    assert every == 4 * last == 4 * res["no_accum"]["reduce_scatters"]
    assert res["accum4_every2"]["reduce_scatters"] == 2 * last  # after micro-batches 2 and 4


def test_keeping_parameters_unsharded_between_micro_batches_gathers_once_per_step(res):
    """parallelism.fsdp_reshard_after_backward = last_micro_batch: the same training (the optimizer
    must see resharded parameters and the next step must gather the updated ones, so the losses of
    all steps after the first are the check) with a quarter of the all-gathers under reshard never."""
    for name in ("accum4_keep", "accum4_keep_default"):
        assert_matches_single_rank(name, res[name], res["no_accum"])
    never, keep = res["accum4_never"]["all_gathers"], res["accum4_keep"]["all_gathers"]
    assert keep > 0, "no all-gather was seen: the counter does not see this torch's FSDP2"
    assert never == 4 * keep
    # Default resharding gathers again in backward, but the forwards after the first skip theirs.
    assert keep < res["accum4_keep_default"]["all_gathers"] < res["accum4_every"]["all_gathers"]
