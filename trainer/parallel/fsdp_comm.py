"""FSDP's collectives on NCCL symmetric memory: parallelism.fsdp_all_gather = "copy_engine" and
parallelism.fsdp_reduce_scatter = "symmetric_memory".

NCCL's all-gather is a kernel that holds SMs for as long as the transfer lasts. FSDP overlaps it
with the GEMMs of the neighbouring block, and those GEMMs then run on fewer SMs. Within one node
NCCL (>= 2.28) can move the shards with the copy engines instead, using no SM, when two things
hold: the gather buffer is NCCL symmetric memory (registered as a window at the same offset on
every rank of the group), and the communicator runs the zero-CTA policy (NCCL_CTA_POLICY=2, set
before the process group starts). A reduce-scatter must add, which the copy engines cannot; on
symmetric buffers NCCL (>= 2.27) can run its symmetric-memory kernels for it instead of the ring ones.

FSDP2 lets a caller choose where its collective buffers come from and how the collective is called
(`FSDPModule.set_custom_all_gather` / `set_custom_reduce_scatter`; torch 2.11 allocates the gather
output and both reduce-scatter buffers through them). Here the buffers come from torch's NCCL
symmetric-memory pool, so each buffer size is registered once and then reused.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import torch
import torch.distributed as dist

from trainer.parallel.collectives import all_gather_single, reduce_scatter_single

logger = logging.getLogger("titankit")

AG_KEY, RS_KEY = "parallelism.fsdp_all_gather", "parallelism.fsdp_reduce_scatter"
ZERO_CTA_POLICY = "2"  # NCCL_CTA_POLICY_ZERO
MIN_NCCL = (2, 28)  # the first NCCL with copy-engine collectives


def set_cta_policy_env(fsdp_all_gather: str) -> None:
    """Before init_process_group: the zero-CTA policy that lets NCCL use the copy engines. It applies
    to every communicator of the process; NCCL documents it as "zero CTAs where it can", so the
    collectives with no copy-engine path here (the reduce-scatters) still run as kernels (the 2-GPU
    test checks that they do). A value the user exported wins."""
    if fsdp_all_gather != "copy_engine":
        return
    current = os.environ.setdefault("NCCL_CTA_POLICY", ZERO_CTA_POLICY)
    if current != ZERO_CTA_POLICY:
        logger.warning("%s = copy_engine, but NCCL_CTA_POLICY=%s is exported: NCCL uses the copy engines "
                       "only under the zero-CTA policy (NCCL_CTA_POLICY=%s); the all-gathers will run as "
                       "kernels on symmetric memory instead", AG_KEY, current, ZERO_CTA_POLICY)


def _fsdp_api():
    """(AllGather, ReduceScatter, symm_mem) of FSDP2's custom-collective interface, or None when this
    torch lacks it."""
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError:
        return None
    needed = (hasattr(FSDPModule, "set_custom_all_gather"), hasattr(FSDPModule, "set_custom_reduce_scatter"),
              hasattr(symm_mem, "get_mem_pool"), hasattr(symm_mem, "set_backend"),
              hasattr(torch.cuda, "use_mem_pool"))
    return (AllGather, ReduceScatter, symm_mem) if all(needed) else None


def check_symmetric_memory_supported(setting: str, device_type: str, group: dist.ProcessGroup | None = None) -> None:
    """Raise ValueError saying what is missing when `setting` (e.g. "parallelism.fsdp_all_gather =
    'copy_engine'") cannot run here."""
    if device_type != "cuda":
        raise ValueError(f"{setting} needs CUDA GPUs and NCCL; this run is on {device_type}. "
                         "Use 'nccl' (the default).")
    if group is not None:
        backend = dist.get_backend(group)  # e.g. "cpu:gloo,cuda:nccl": NCCL must serve CUDA tensors
        if "nccl" not in {part.rpartition(":")[2] for part in backend.split(",")}:
            raise ValueError(f"{setting} needs the NCCL backend; the FSDP group uses {backend}.")
    if _fsdp_api() is None:
        raise ValueError(f"{setting} needs FSDPModule.set_custom_all_gather / set_custom_reduce_scatter and "
                         f"torch's NCCL symmetric memory (torch.distributed._symmetric_memory.get_mem_pool), "
                         f"which torch {torch.__version__} lacks (torch 2.11 has them). Use 'nccl'.")
    version = tuple(torch.cuda.nccl.version())
    if version[:2] < MIN_NCCL:
        raise ValueError(f"{setting} needs NCCL >= {MIN_NCCL[0]}.{MIN_NCCL[1]} (copy-engine and symmetric-memory "
                         f"collectives); this torch runs NCCL {'.'.join(map(str, version))}. Use 'nccl'.")


def _api():
    api = _fsdp_api()
    if api is None:
        raise ValueError(f"{AG_KEY} / {RS_KEY}: this torch has no FSDP custom collectives")
    return api


class _SymmetricBuffers:
    """allocate() for FSDP's collective buffers from torch's NCCL symmetric-memory pool. A MemPool
    hands a freed buffer of the same size back to the next collective, so each size is registered
    with NCCL once."""

    def __init__(self, symm_mem) -> None:
        symm_mem.set_backend("NCCL")
        self._symm_mem = symm_mem
        self.calls = 0

    def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
        with torch.cuda.use_mem_pool(self._symm_mem.get_mem_pool(device)):
            return torch.empty(size, dtype=dtype, device=device)


def make_symmetric_all_gather():
    """An FSDP2 AllGather whose gather buffers are NCCL symmetric memory (see the module doc)."""
    all_gather, _, symm_mem = _api()

    class SymmetricMemoryAllGather(_SymmetricBuffers, all_gather):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: dist.ProcessGroup, async_op: bool = False):
            # FSDP puts this rank's shard inside the output buffer, so registering it covers both;
            # the buffer's segment is registered with the group once, later calls find it.
            symm_mem.rendezvous(output_tensor, group=group.group_name)
            self.calls += 1
            return all_gather_single(output_tensor, input_tensor, group=group, async_op=async_op)

    return SymmetricMemoryAllGather(symm_mem)


def make_symmetric_reduce_scatter():
    """An FSDP2 ReduceScatter whose input and output buffers are NCCL symmetric memory."""
    _, reduce_scatter, symm_mem = _api()

    class SymmetricMemoryReduceScatter(_SymmetricBuffers, reduce_scatter):
        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: dist.ProcessGroup, op, async_op: bool = False):
            symm_mem.rendezvous(input_tensor, group=group.group_name)
            symm_mem.rendezvous(output_tensor, group=group.group_name)
            self.calls += 1
            return reduce_scatter_single(output_tensor, input_tensor, op=op, group=group, async_op=async_op)

    return SymmetricMemoryReduceScatter(symm_mem)


def attach_comms(units: list, group: dist.ProcessGroup, all_gather=None, reduce_scatter=None) -> None:
    """Route every FSDP unit's all-gather and/or reduce-scatter through the given objects. The barrier
    starts the group's NCCL communicator before the first rendezvous needs it."""
    dist.barrier(group=group)
    for unit in units:
        if all_gather is not None:
            unit.set_custom_all_gather(all_gather)
        if reduce_scatter is not None:
            unit.set_custom_reduce_scatter(reduce_scatter)
