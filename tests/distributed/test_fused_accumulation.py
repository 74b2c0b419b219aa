"""parallelism.fsdp_fused_grad_accumulation: with a bf16 reduce of fp32 parameters and gradient
accumulation, the micro-batches after the first add the bf16 reduce-scatter output straight into
the fp32 sharded gradients (no separate cast). Training must be bitwise the same as FSDP2's own path:
two gloo ranks train the tiny Llama of test_layouts with 4 micro-batches per step, fused and not;
losses of every step and the gradients of step 1 must be equal, not close. And the fused path must
actually run (a check that this torch's FSDP2 still calls what trainer/parallel/fsdp_accumulate.py
wraps) on exactly the micro-batches that find gradients already there: 3 of 4, every unit.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed.test_context_parallel import spawn_world
from tests.distributed.test_layouts import BASE, STEPS
from tests.helpers.compare import full_grads

pytestmark = pytest.mark.slow

COMMON = ["--parallelism.data_parallel_shard_degree=2", "--training.local_batch_size=1",
          "--training.mixed_precision_reduce=bfloat16"]
RUNS = {"fused": ["--parallelism.fsdp_fused_grad_accumulation=true"],
        "plain": ["--parallelism.fsdp_fused_grad_accumulation=false"],
        # A same-dtype reduce has no cast to skip: the wrapper must leave it alone.
        "fp32_reduce": ["--parallelism.fsdp_fused_grad_accumulation=true",
                        "--training.mixed_precision_reduce=float32"]}


def _train(rank: int, world: int, out_file: str, dump: str) -> None:
    from torch.distributed.fsdp import FSDPModule

    from trainer.config import load_config
    from trainer.parallel import fsdp_accumulate
    from trainer.trainer import Trainer

    torch.use_deterministic_algorithms(True)
    results = {}
    for name, overrides in RUNS.items():
        trainer = Trainer(load_config([*BASE, *COMMON, *overrides, f"--run.dump_folder={dump}",
                                       f"--run.name={name}"]))
        before, losses = fsdp_accumulate.fused_calls, []
        for step in range(STEPS):
            losses.append(trainer.train_step())
            if step == 0:
                grads = full_grads(trainer.model)
        # Units that own parameters (the root holds none once its children are wrapped; norm and
        # output share one).
        groups = {id(g): g for m in trainer.model.modules() if isinstance(m, FSDPModule)
                  for g in [m._get_fsdp_state()._fsdp_param_group] if g is not None and g.fsdp_params}
        units = len(groups)
        results[name] = {"losses": losses, "grads": grads, "accum": trainer.grad_accum, "units": units,
                         "fused_calls": fsdp_accumulate.fused_calls - before}
        trainer.close()
    if rank == 0:
        torch.save(results, out_file)
    dist.barrier()


@pytest.fixture(scope="module")
def res(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fused_accum")
    spawn_world(2, _train, str(tmp / "results.pt"), str(tmp))
    return torch.load(tmp / "results.pt")


def test_fused_accumulation_trains_bitwise_the_same(res):
    fused, plain = res["fused"], res["plain"]
    assert fused["accum"] == plain["accum"] == 4
    assert fused["losses"] == plain["losses"]
    assert fused["grads"].keys() == plain["grads"].keys()
    for name, g in fused["grads"].items():
        assert g.dtype == torch.float32, name
        assert torch.equal(g, plain["grads"][name]), f"{name}: fused gradient differs"


def test_fused_path_runs_on_every_micro_batch_after_the_first(res):
    fused = res["fused"]
    assert fused["units"] > 0
    assert fused["fused_calls"] == STEPS * (fused["accum"] - 1) * fused["units"], (
        "the fused path did not run where expected: has FSDP2's foreach_reduce changed?")
    assert res["plain"]["fused_calls"] == 0
    assert res["fp32_reduce"]["fused_calls"] == 0
