"""parallelize_moe: every parallelism of parallelize_llama, plus expert parallelism, for the MoE model.

Order (DESIGN.md section 2): TP/SP and EP -> CP -> activation checkpointing -> compile -> FSDP/HSDP.
It reuses the llama helpers (TP plan, CP, AC, compile, FSDP) and adds, for the MoE layers:

- TP: attention is tensor parallel exactly as in Llama; the MoE FFN is NOT split by TP. ffn_norm
  hands the MoE its sequence shard (B, S/tp, D) as a plain tensor, so the tp ranks route different
  tokens, and the MoE's parameters are data parallel over tp as well (FSDP over "moe_dp" below).
- EP (trainer/parallel/expert.py): experts Shard(0) over "ep", all-to-all dispatch and combine.
- FSDP units, innermost first: experts over "dp_mod_ep" (when ep > 1; Shard(1), since dim 0 is the
  ep split; when dp_mod_ep and dp_replicate are 1, each expert has one owner and stays outside FSDP,
  see apply_fsdp_moe_units), the rest of the MoE (router, shared experts) over "moe_dp" =
  dp_shard x cp x tp (when tp > 1; otherwise it stays in its block's unit over dp_shard_cp), then the
  llama units. With dp_replicate > 1 each of these meshes gains the "dp_replicate" axis (HSDP).
- Global statistics: each MoE's `reduce_counts` becomes a sum over all ranks (every token is routed
  on exactly one rank), used by the aux loss in forward and by `model.post_optimizer_step()`; and
  `aux_loss_microbatches` is set to the gradient-accumulation count.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import fully_shard
from torch.distributed.tensor import Shard
from torch.distributed.tensor.parallel import SequenceParallel, parallelize_module

from trainer.models.moe import MoEBlock
from trainer.parallel.dims import ParallelDims, device_type
from trainer.parallel.fsdp import mixed_precision_policy

logger = logging.getLogger("titankit")


def _sum_over_world(t: torch.Tensor) -> torch.Tensor:
    """Sum over all ranks (wrapped in torch.compiler.disable when installed: importing dynamo here,
    at import time, would load Triton's language before tests can select its interpreter)."""
    out = t.clone()
    dist.all_reduce(out)
    return out


def apply_tp_moe(model: nn.Module, tp_mesh, *, loss_parallel: bool, async_tp: bool,
                 compile_enabled: bool, device_type: str) -> nn.Module:
    """Llama's TP plan on attention, embeddings and output; MoE blocks get their sequence shard."""
    from trainer.parallel.tensor import enable_async_tp, llama_tp_plan

    if async_tp:
        enable_async_tp(tp_mesh, device_type, compile_enabled)
    top, block = llama_tp_plan(loss_parallel)
    moe_block = {k: v for k, v in block.items() if not k.startswith("feed_forward")}
    moe_block["ffn_norm"] = SequenceParallel(use_local_output=True)  # (B, S/tp, D) into the MoE
    parallelize_module(model, tp_mesh, top)
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, moe_block if isinstance(layer, MoEBlock) else block)
    logger.info(
        "Applied tensor + sequence parallelism over tp=%d to attention of %d blocks (MoE FFNs take "
        "their sequence shard; dense FFNs are split), loss parallel %s, async TP %s",
        tp_mesh.size(), len(model.layers), "on" if loss_parallel else "off", "on" if async_tp else "off",
    )
    return model


def _dp_mesh(mesh, dims: ParallelDims, axis: str):
    return mesh[("dp_replicate", axis)] if dims.hsdp_enabled else mesh[axis]


def sole_expert_owner(dims: ParallelDims) -> bool:
    """True when every expert lives on exactly one rank (ep = all ranks that route tokens, no
    replicas), e.g. EP 8 on one 8-GPU node: no data parallelism is left for the experts."""
    return dims.ep_enabled and dims.dp_replicate * dims.dp_shard * dims.cp * dims.tp == dims.ep


def apply_fsdp_moe_units(model: nn.Module, dims: ParallelDims, meshes, training,
                         reshard_after_forward: str, device_type: str) -> tuple[int, set]:
    """The MoE-specific FSDP units (see the module docstring). Returns how many were made and the
    expert parameters FSDP must leave alone: with a sole owner per expert an FSDP unit over one rank
    would only cast the weights, and (PyTorch 2.11-2.13) such a unit misbehaves when per-op
    selective AC recomputes its region, so the experts are plain Shard(0) DTensors that LocalShard
    casts to the compute dtype, and their gradients need no reduction."""
    mp = mixed_precision_policy(training, device_type)
    reshard = reshard_after_forward != "never"
    units, ignored = [], set()
    sole = sole_expert_owner(dims)
    for _, moe in model.moe_layers():
        if sole:
            moe.experts.weight_view.compute_dtype = mp.param_dtype
            ignored |= set(moe.experts.parameters())
        elif dims.ep_enabled:
            fully_shard(moe.experts, mesh=_dp_mesh(meshes.experts, dims, "dp_mod_ep"), mp_policy=mp,
                        reshard_after_forward=reshard, shard_placement_fn=lambda p: Shard(1))
            units.append(moe.experts)
        if dims.tp_enabled:
            fully_shard(moe, mesh=_dp_mesh(meshes.dp, dims, "moe_dp"), mp_policy=mp,
                        reshard_after_forward=reshard, ignored_params=ignored or None)
            units.append(moe)
    for unit in units:
        unit.set_gradient_divide_factor(1.0)  # the loss is already a share of the global mean
        unit.set_force_sum_reduction_for_comms(True)
    return len(units), ignored


def parallelize_moe(model: nn.Module, dims: ParallelDims, job_config) -> nn.Module:
    """Shard/wrap the MoETransformer `model` (still on meta) in place according to `dims`."""
    par = job_config.parallelism
    dev = device_type()
    n_experts = model.args.n_experts
    if n_experts % dims.ep != 0:
        raise ValueError(
            f"parallelism.expert_parallel_degree = {dims.ep} must divide model n_experts = {n_experts}"
        )
    ac = job_config.activation_checkpoint
    meshes = None
    if dims.tp_enabled or dims.ep_enabled:
        from trainer.parallel.expert import build_moe_meshes

        meshes = build_moe_meshes(dims, dev)

    if dims.tp_enabled:
        apply_tp_moe(model, dims.mesh["tp"], loss_parallel=par.enable_loss_parallel,
                     async_tp=par.enable_async_tensor_parallel,
                     compile_enabled=job_config.compile.enable, device_type=dev)
    if dims.ep_enabled:
        from trainer.parallel.expert import apply_ep

        apply_ep(model, meshes.experts)

    t = job_config.training
    gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * dims.dp
    microbatches = gbs // (t.local_batch_size * dims.dp)
    reduce_counts = torch.compiler.disable(_sum_over_world) if dims.world_size > 1 else None
    for _, moe in model.moe_layers():
        moe.aux_loss_microbatches = microbatches
        if reduce_counts is not None:
            moe.reduce_counts = reduce_counts

    if dims.cp_enabled:
        from trainer.parallel.context import apply_cp

        apply_cp(model, dims.mesh["cp"], method=par.context_parallel_method)

    if ac.mode != "none":
        from trainer.parallel.checkpointing import apply_ac

        apply_ac(model, ac, compiled=job_config.compile.enable)

    if job_config.compile.enable:
        from trainer.parallel.checkpointing import compile_memory_budget
        from trainer.parallel.compile import apply_compile

        apply_compile(model, memory_budget=compile_memory_budget(ac))

    ignored: set = set()
    if meshes is not None:
        units, ignored = apply_fsdp_moe_units(model, dims, meshes, t, par.fsdp_reshard_after_forward, dev)
        experts = ("experts: one owner each, no FSDP" if ignored else
                   f"experts over dp_mod_ep={meshes.experts['dp_mod_ep'].size()}")
        logger.info("Applied FSDP2 to %d MoE units (%s, MoE over moe_dp=%d%s)",
                    units, experts, meshes.dp["moe_dp"].size(),
                    f" x dp_replicate={dims.dp_replicate}" if dims.hsdp_enabled else "")
    from trainer.parallel.fsdp import apply_fsdp, fsdp_needed

    if fsdp_needed(dims, t, dev):
        apply_fsdp(model, dims, t, reshard_after_forward=par.fsdp_reshard_after_forward, device_type=dev,
                   ignored_params=ignored, prefetch=par.fsdp_prefetch, all_gather=par.fsdp_all_gather,
                   reduce_scatter=par.fsdp_reduce_scatter)
    elif dims.world_size > 1 and meshes is None:
        logger.info("No data parallelism to apply (dp_replicate = dp_shard = cp = 1)")
    return model

