"""The route parallelism.fsdp_all_gather = copy_engine takes through FSDP2, on CPU.

The copy engines need CUDA and NCCL, but the wiring does not: trainer/parallel/fsdp_comm.py
attaches one AllGather object to every FSDP unit, and FSDP2 must then take every gather buffer
from its allocate() and call it for every gather. Two gloo ranks train the tiny Llama with FSDP 2
twice, with FSDP's own all-gather and with a recording AllGather attached the same way: the losses
must be identical, every gather must have gone through the recorder, into a buffer it allocated.
On 2 GPUs, tests/gpu/test_fsdp_copy_engine_gpu.py runs the real thing.
"""

from __future__ import annotations

import pytest
import torch
import torch.distributed as dist

from tests.distributed.test_context_parallel import spawn_world
from tests.distributed.test_layouts import BASE, STEPS

pytestmark = pytest.mark.slow


def _recording_all_gather():
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather

    class Recording(AllGather):
        def __init__(self):
            self.allocated: list[int] = []  # data pointers of the buffers handed to FSDP
            self.gathered_into: list[int] = []

        def allocate(self, size, *, dtype, device):
            buf = torch.empty(size, dtype=dtype, device=device)
            self.allocated.append(buf.data_ptr())
            return buf

        def __call__(self, output_tensor, input_tensor, group, async_op=False):
            self.gathered_into.append(output_tensor.data_ptr())
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)

    return Recording()


def _train(rank: int, world: int, out_file: str, dump: str) -> None:
    from torch.distributed.fsdp import FSDPModule

    from trainer.config import load_config
    from trainer.parallel.fsdp import fsdp_mesh
    from trainer.parallel.fsdp_comm import attach_all_gather
    from trainer.trainer import Trainer

    torch.use_deterministic_algorithms(True)
    results = {}
    for name in ("fsdp_default", "custom"):
        trainer = Trainer(load_config([*BASE, "--parallelism.data_parallel_shard_degree=2",
                                       "--training.local_batch_size=4",
                                       f"--run.dump_folder={dump}", f"--run.name={name}"]))
        comm = None
        if name == "custom":
            comm = _recording_all_gather()
            units = [m for m in trainer.model.modules() if isinstance(m, FSDPModule)]
            attach_all_gather(units, comm, fsdp_mesh(trainer.dims).get_group())
        losses = [trainer.train_step() for _ in range(STEPS)]
        results[name] = {"losses": losses, "units": sum(isinstance(m, FSDPModule) for m in trainer.model.modules()),
                         "allocated": comm.allocated if comm else [],
                         "gathered_into": comm.gathered_into if comm else []}
        trainer.close()
    if rank == 0:
        torch.save(results, out_file)
    dist.barrier()


def test_every_fsdp_gather_goes_through_the_attached_all_gather(tmp_path):
    spawn_world(2, _train, str(tmp_path / "res.pt"), str(tmp_path))
    res = torch.load(tmp_path / "res.pt")
    assert res["custom"]["losses"] == res["fsdp_default"]["losses"]
    gathered, allocated = res["custom"]["gathered_into"], res["custom"]["allocated"]
    # Each unit with parameters gathers at least once per step (the root holds none of its own).
    assert len(gathered) >= STEPS * (res["custom"]["units"] - 1), (len(gathered), res["custom"]["units"])
    assert len(gathered) == len(allocated)
    # Every gather wrote into a buffer the object allocated (the caching allocator may reuse addresses).
    assert set(gathered) <= set(allocated)
