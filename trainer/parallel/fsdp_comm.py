"""FSDP all-gathers on the GPUs' copy engines: parallelism.fsdp_all_gather = "copy_engine".

NCCL's all-gather is a kernel that holds SMs for as long as the transfer lasts. FSDP overlaps it
with the GEMMs of the neighbouring block, and those GEMMs then run on fewer SMs. Within one node
NCCL (>= 2.28) can move the shards with the copy engines instead, using no SM, when two things
hold: the gather buffer is NCCL symmetric memory (registered as a window at the same offset on
every rank of the group), and the communicator runs the zero-CTA policy (NCCL_CTA_POLICY=2, set
before the process group starts). FSDP2 lets a caller choose where its gather buffer comes from
and how the gather is called (`FSDPModule.set_custom_all_gather`). Here the buffers come from
torch's NCCL symmetric-memory pool, so each buffer size is registered once and then reused.

Reduce-scatters stay NCCL kernels: they must add, and the copy engines cannot.
"""

from __future__ import annotations

import logging
import os
from typing import Sequence

import torch
import torch.distributed as dist

logger = logging.getLogger("titankit")

KEY = "parallelism.fsdp_all_gather"
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
                       "kernels on symmetric memory instead", KEY, current, ZERO_CTA_POLICY)


def _fsdp_api():
    """FSDP2's custom-collective interface, or None when this torch lacks it."""
    try:
        from torch.distributed.fsdp import FSDPModule
        from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather
        import torch.distributed._symmetric_memory as symm_mem
    except ImportError:
        return None
    needed = (hasattr(FSDPModule, "set_custom_all_gather"), hasattr(symm_mem, "get_mem_pool"),
              hasattr(symm_mem, "set_backend"), hasattr(torch.cuda, "use_mem_pool"))
    return (AllGather, symm_mem) if all(needed) else None


def check_copy_engine_supported(device_type: str, group: dist.ProcessGroup | None = None) -> None:
    """Raise ValueError saying what is missing when copy-engine all-gathers cannot run here."""
    where = f"{KEY} = 'copy_engine'"
    if device_type != "cuda":
        raise ValueError(f"{where} needs CUDA GPUs and NCCL; this run is on {device_type}. "
                         "Use 'nccl' (the default).")
    if group is not None and dist.get_backend(group) != "nccl":
        raise ValueError(f"{where} needs the NCCL backend; the FSDP group uses {dist.get_backend(group)}.")
    if _fsdp_api() is None:
        raise ValueError(f"{where} needs FSDPModule.set_custom_all_gather and torch's NCCL symmetric "
                         f"memory (torch.distributed._symmetric_memory.get_mem_pool), which torch "
                         f"{torch.__version__} lacks (torch 2.11 has both). Use 'nccl'.")
    version = tuple(torch.cuda.nccl.version())
    if version[:2] < MIN_NCCL:
        raise ValueError(f"{where} needs NCCL >= {MIN_NCCL[0]}.{MIN_NCCL[1]} (copy-engine collectives); this "
                         f"torch runs NCCL {'.'.join(map(str, version))}. Use 'nccl'.")


def make_symmetric_all_gather():
    """An FSDP2 AllGather whose gather buffers are NCCL symmetric memory (see the module doc)."""
    api = _fsdp_api()
    if api is None:
        raise ValueError(f"{KEY} = 'copy_engine': this torch has no FSDP custom all-gather")
    base, symm_mem = api

    class SymmetricMemoryAllGather(base):
        def __init__(self) -> None:
            symm_mem.set_backend("NCCL")
            self.calls = 0

        def allocate(self, size: Sequence[int], *, dtype: torch.dtype, device: torch.device) -> torch.Tensor:
            # A MemPool hands a freed buffer of the same size back to the next gather, so each size
            # is registered with NCCL once; FSDP's output buffer holds the input shard in place.
            with torch.cuda.use_mem_pool(symm_mem.get_mem_pool(device)):
                return torch.empty(size, dtype=dtype, device=device)

        def __call__(self, output_tensor: torch.Tensor, input_tensor: torch.Tensor,
                     group: dist.ProcessGroup, async_op: bool = False):
            # Registers the buffer's segment with the group once; later calls find it registered.
            symm_mem.rendezvous(output_tensor, group=group.group_name)
            self.calls += 1
            return dist.all_gather_into_tensor(output_tensor, input_tensor, group=group, async_op=async_op)

    return SymmetricMemoryAllGather()


def attach_all_gather(units: list, comm, group: dist.ProcessGroup) -> None:
    """Route every FSDP unit's all-gather through `comm`. The barrier starts the group's NCCL
    communicator before the first rendezvous needs it."""
    dist.barrier(group=group)
    for unit in units:
        unit.set_custom_all_gather(comm)
