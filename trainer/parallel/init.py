"""Layout-independent weight initialisation.

The model's `init_weights(init_fn)` names each parameter by its fqn and its std; this init_fn draws
the FULL tensor from a generator seeded by (seed, fqn) on every rank and keeps only the local shard.
So a given seed gives bitwise the same weights on 1 rank, under FSDP, TP, CP or any mix (DESIGN.md
principle 2), at the cost of generating each full parameter once per rank (fast on GPU; ~1 s for 70B).
"""

from __future__ import annotations

import zlib
from typing import Callable

import torch
from torch.distributed.tensor import DTensor, distribute_tensor

# Wrappers that AC and compile insert into fqns; the seed must not depend on them.
_WRAPPER_PARTS = ("_checkpoint_wrapped_module", "_orig_mod", "_fsdp_wrapped_module")


def clean_fqn(fqn: str) -> str:
    return ".".join(p for p in fqn.split(".") if p not in _WRAPPER_PARTS)


def param_seed(seed: int, fqn: str) -> int:
    """A 63-bit seed that depends only on the run seed and the parameter's clean name."""
    return (seed * 1_000_003 + zlib.crc32(clean_fqn(fqn).encode())) % (2**63 - 1)


def seeded_init_fn(seed: int, device: torch.device) -> Callable[[str, torch.Tensor, float], None]:
    """Returns init_fn(fqn, tensor, std): truncated normal(0, std, +-3 std), identical for any layout."""

    @torch.no_grad()
    def init_fn(fqn: str, tensor: torch.Tensor, std: float) -> None:
        gen = torch.Generator(device=device)
        gen.manual_seed(param_seed(seed, fqn))
        full = torch.empty(tensor.shape, dtype=torch.float32, device=device)
        torch.nn.init.trunc_normal_(full, mean=0.0, std=std, a=-3 * std, b=3 * std, generator=gen)
        if isinstance(tensor, DTensor):
            # src_data_rank=None: every rank slices its own identical copy, no communication.
            local = distribute_tensor(full, tensor.device_mesh, tensor.placements, src_data_rank=None)
            tensor.to_local().copy_(local.to_local())
        else:
            tensor.copy_(full)

    return init_fn
