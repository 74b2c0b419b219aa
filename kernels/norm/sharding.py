"""DTensor sharding rules for the Triton RMSNorm ops, so they run under tensor/sequence parallelism.

RMSNorm normalises each row on its own, so x may be sharded on any dimension but the last (the
normalised one) while the weight is replicated; the output keeps x's sharding. In the backward, dx
keeps the sharding and each rank's dw covers only its rows, so dw is a Partial sum (reduced by
DTensor when needed). Without these rules DTensor refuses the custom op.
"""

from __future__ import annotations

import torch
from torch.distributed.tensor import Partial, Replicate, Shard
from torch.distributed.tensor.experimental import register_sharding

import kernels.norm.op  # noqa: F401  (defines the ops registered below)


@register_sharding(torch.ops.titankit.rms_norm.default)
def _rms_norm_sharding(x, weight, eps):
    rules = [([Replicate()], [Replicate(), Replicate(), None])]
    for dim in range(x.ndim - 1):
        rules.append(([Shard(dim)], [Shard(dim), Replicate(), None]))
    return rules


@register_sharding(torch.ops.titankit.rms_norm_backward.default)
def _rms_norm_backward_sharding(dy, x, weight, eps):
    rules = [([Replicate(), Replicate()], [Replicate(), Replicate(), Replicate(), None])]
    for dim in range(x.ndim - 1):
        rules.append(([Shard(dim), Partial()], [Shard(dim), Shard(dim), Replicate(), None]))
    return rules
