"""Parallelism applied from outside the single-device model code.

`parallelize(model, dims, job_config)` dispatches on `model.name` to the family's parallelizer.
"""

from __future__ import annotations

from typing import Callable

from torch import nn

from trainer.parallel.dims import ParallelDims
from trainer.parallel.llama import parallelize_llama
from trainer.parallel.moe import parallelize_moe

PARALLELIZERS: dict[str, Callable[[nn.Module, ParallelDims, object], nn.Module]] = {
    "llama3": parallelize_llama,
    "moe": parallelize_moe,
}


def parallelize(model: nn.Module, dims: ParallelDims, job_config) -> nn.Module:
    """Apply TP/SP -> CP -> activation checkpointing -> compile -> FSDP/HSDP to `model` in place."""
    name = job_config.model.name
    if name not in PARALLELIZERS:
        raise ValueError(
            f"model.name = {name!r} has no parallelize function; valid values are "
            f"{sorted(PARALLELIZERS)}"
        )
    # Checked here, once for every family: each parallelizer passes the flag on to apply_tp.
    if job_config.parallelism.enable_async_tensor_parallel and not dims.tp_enabled:
        raise ValueError(
            "parallelism.enable_async_tensor_parallel = true needs "
            f"parallelism.tensor_parallel_degree > 1 (it is {dims.tp})"
        )
    return PARALLELIZERS[name](model, dims, job_config)
