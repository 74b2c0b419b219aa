"""The route parallelism.fsdp_all_gather = copy_engine and fsdp_reduce_scatter = symmetric_memory
take through FSDP2, on CPU.

NCCL symmetric memory needs CUDA, but the wiring does not: trainer/parallel/fsdp_comm.py attaches one
AllGather and one ReduceScatter object to every FSDP unit, and FSDP2 must then take every collective
buffer from their allocate() and call them for every gather and reduce-scatter. Two gloo ranks train
the tiny Llama with FSDP 2 twice, with FSDP's own collectives and with recording objects attached
the same way: the losses must be identical, and every collective must have gone through the
recorders, into buffers they allocated. On 2 GPUs, tests/gpu/test_fsdp_copy_engine_gpu.py runs the
real thing.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed.test_context_parallel import spawn_world
from tests.distributed.test_grad_sync import ALL_GATHERS, REDUCE_SCATTERS, _count_calls
from tests.distributed.test_layouts import BASE, STEPS

pytestmark = pytest.mark.slow


class _Recorder:
    """allocate() for FSDP's buffers, remembering each one's address."""

    def __init__(self):
        self.allocated: list[int] = []
        self.used: list[tuple[int, ...]] = []  # per call, the addresses of the buffers it was given

    def allocate(self, size, *, dtype, device):
        buf = torch.empty(size, dtype=dtype, device=device)
        self.allocated.append(buf.data_ptr())
        return buf


def _recorders():
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

    class Gather(_Recorder, AllGather):
        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            self.used.append((output_tensor.data_ptr(),))
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)

    class Scatter(_Recorder, ReduceScatter):
        def __call__(self, output_tensor, input_tensor, group, op, async_op=False):
            self.used.append((input_tensor.data_ptr(), output_tensor.data_ptr()))
            return dist.reduce_scatter_tensor(output_tensor, input_tensor, op=op, group=group, async_op=async_op)

    return Gather(), Scatter()


def _train(rank: int, world: int, out_file: str, dump: str) -> None:
    from torch.distributed.fsdp import FSDPModule

    from trainer.config import load_config
    from trainer.parallel.fsdp import fsdp_mesh
    from trainer.parallel.fsdp_comm import attach_comms
    from trainer.trainer import Trainer

    torch.use_deterministic_algorithms(True)
    gathers, scatters = [0], [0]  # every torch.distributed call FSDP (or a recorder) makes
    _count_calls(gathers, ALL_GATHERS)
    _count_calls(scatters, REDUCE_SCATTERS)
    results = {}
    for name in ("fsdp_default", "custom"):
        trainer = Trainer(load_config([*BASE, "--parallelism.data_parallel_shard_degree=2",
                                       "--training.local_batch_size=4",
                                       f"--run.dump_folder={dump}", f"--run.name={name}"]))
        # Every unit but the root, as apply_fsdp attaches them (the root holds no parameters).
        units = [m for m in trainer.model.modules() if isinstance(m, FSDPModule) and m is not trainer.model]
        gather = scatter = None
        if name == "custom":
            gather, scatter = _recorders()
            attach_comms(units, fsdp_mesh(trainer.dims).get_group(), all_gather=gather, reduce_scatter=scatter)
        g0, s0 = gathers[0], scatters[0]
        losses = [trainer.train_step() for _ in range(STEPS)]
        results[name] = {"losses": losses, "calls": {"gather": gathers[0] - g0, "scatter": scatters[0] - s0},
                         "gather": (gather.allocated, gather.used) if gather else None,
                         "scatter": (scatter.allocated, scatter.used) if scatter else None}
        trainer.close()
    if rank == 0:
        torch.save(results, out_file)
    dist.barrier()


def test_every_fsdp_collective_goes_through_the_attached_objects(tmp_path):
    spawn_world(2, _train, str(tmp_path / "res.pt"), str(tmp_path))
    res = torch.load(tmp_path / "res.pt")
    custom = res["custom"]
    assert custom["losses"] == res["fsdp_default"]["losses"]
    for kind, per_call in (("gather", 1), ("scatter", 2)):
        allocated, used = custom[kind]
        # As many collectives as FSDP's own run made, every one of them through the recorder.
        assert len(used) == custom["calls"][kind] == res["fsdp_default"]["calls"][kind] >= STEPS, kind
        assert len(allocated) == per_call * len(used), kind  # gather: its output; scatter: input and output
        # Every buffer a collective was given came from the object (the allocator may reuse addresses).
        assert {p for call in used for p in call} <= set(allocated), kind
