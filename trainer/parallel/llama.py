"""parallelize_llama: apply every parallelism technique to a Llama-3 model built on meta.

The order is fixed (DESIGN.md section 2): TP/SP -> CP -> activation checkpointing -> compile ->
FSDP/HSDP. TP must come first because it turns parameters into TP-sharded DTensors that FSDP then
shards again on its own mesh axes; checkpoint wrappers and compiled blocks are wrapped by FSDP last
so its hooks run outside them. Each helper logs one line saying what it applied.
"""

from __future__ import annotations

import logging

from torch import nn

from trainer.parallel.dims import ParallelDims, device_type

logger = logging.getLogger("titankit")


def parallelize_llama(model: nn.Module, dims: ParallelDims, job_config) -> nn.Module:
    """Shard/wrap `model` (still on meta) in place according to `dims` and `job_config`."""
    par = job_config.parallelism
    dev = device_type()
    if dims.tp_enabled:
        from trainer.parallel.tensor import apply_tp

        apply_tp(
            model,
            dims.mesh["tp"],
            loss_parallel=par.enable_loss_parallel,
            async_tp=par.enable_async_tensor_parallel,
            compile_enabled=job_config.compile.enable,
            device_type=dev,
        )

    if dims.cp_enabled:
        from trainer.parallel.context import apply_cp

        apply_cp(model, dims.mesh["cp"], method=par.context_parallel_method)

    ac = job_config.activation_checkpoint
    if ac.mode != "none":
        from trainer.parallel.checkpointing import apply_ac

        apply_ac(model, ac, compiled=job_config.compile.enable)

    if job_config.compile.enable:
        from trainer.parallel.checkpointing import compile_memory_budget
        from trainer.parallel.compile import apply_compile

        apply_compile(model, memory_budget=compile_memory_budget(ac))

    from trainer.parallel.fsdp import apply_fsdp, fsdp_needed

    if fsdp_needed(dims, job_config.training, dev):
        apply_fsdp(
            model,
            dims,
            job_config.training,
            reshard_after_forward=par.fsdp_reshard_after_forward,
            device_type=dev,
            prefetch=par.fsdp_prefetch,
            all_gather=par.fsdp_all_gather,
            reduce_scatter=par.fsdp_reduce_scatter,
        )
    elif dims.world_size > 1:
        logger.info("No data parallelism to apply (dp_replicate = dp_shard = cp = tp = 1)")
    return model
