"""FSDP2 / HSDP: shard parameters, gradients and optimizer state over the data-parallel ranks.

Units (each all-gathers its parameters in one collective and reduce-scatters its gradients in one):
tok_embeddings, every block, norm + output together, then the root. The shard mesh is the
flattened "dp_shard_cp" view: context-parallel ranks see different tokens of the same samples, so
their gradients are summed exactly like data-parallel ones. With dp_replicate > 1 the mesh is 2-D
("dp_replicate", "dp_shard_cp") and FSDP2 does HSDP (reduce-scatter inside a replica group, then
all-reduce across replicas).

The trainer divides the summed token loss by the global token count, so every rank's gradient is
already its exact share of the global mean: FSDP must sum, never average
(`set_gradient_divide_factor(1.0)` and SUM collectives on every unit).
"""

from __future__ import annotations

import logging
import os

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard

from trainer.config.checks import CHOICES, GRAD_SYNC_EVERY
from trainer.parallel.dims import ParallelDims
from trainer.parallel import fsdp_comm

logger = logging.getLogger("titankit")

_DTYPES = {"bfloat16": torch.bfloat16, "float32": torch.float32}
_RESHARD_POLICIES = ("default", "always", "never")
ALL_GATHERS = CHOICES[fsdp_comm.AG_KEY]
REDUCE_SCATTERS = CHOICES[fsdp_comm.RS_KEY]


def _dtype(key: str, value: str) -> torch.dtype:
    if value not in _DTYPES:
        raise ValueError(f"training.{key} = {value!r}: valid values are {sorted(_DTYPES)}")
    return _DTYPES[value]


def mixed_precision_policy(training, device_type: str) -> MixedPrecisionPolicy:
    """bf16 compute on CUDA when asked; fp32 compute on CPU always (CPU bf16 matmuls are slow and
    the CPU runs exist to check numerics)."""
    param = _dtype("mixed_precision_param", training.mixed_precision_param)
    reduce = _dtype("mixed_precision_reduce", training.mixed_precision_reduce)
    if device_type != "cuda":
        param = torch.float32
    return MixedPrecisionPolicy(param_dtype=param, reduce_dtype=reduce)


def fsdp_needed(dims: ParallelDims, training, device_type: str) -> bool:
    """FSDP shards over dp_shard x cp, and is also what casts parameters to bf16 for compute
    (MixedPrecisionPolicy). So it is applied whenever there is something to shard, and on a 1-rank
    data-parallel mesh for TP-only layouts and single-GPU runs, which would otherwise silently train
    in fp32 (torchtitan's TP-only behaviour)."""
    mixed = device_type == "cuda" and training.mixed_precision_param != "float32"
    return dims.fsdp_enabled or dims.hsdp_enabled or dims.tp_enabled or mixed


def fsdp_mesh(dims: ParallelDims):
    """The mesh FSDP shards over: 1-D "dp_shard_cp", or 2-D for HSDP."""
    if dims.hsdp_enabled:
        return dims.mesh[("dp_replicate", "dp_shard_cp")]
    return dims.get_mesh("dp_shard_cp")


def apply_fsdp(
    model: nn.Module,
    dims: ParallelDims,
    training,
    reshard_after_forward: str = "default",
    device_type: str = "cpu",
    ignored_params: set | None = None,
    prefetch: int = 1,
    all_gather: str = "nccl",
    reduce_scatter: str = "nccl",
) -> nn.Module:
    """Wrap the llama-shaped `model` (tok_embeddings, layers, norm, output) in FSDP2 units.
    `ignored_params` (MoE experts with one owner each) stay outside every unit. `all_gather`
    ("nccl" or "copy_engine") and `reduce_scatter` ("nccl" or "symmetric_memory") choose these
    units' collectives (trainer/parallel/fsdp_comm.py)."""
    if reshard_after_forward not in _RESHARD_POLICIES:
        raise ValueError(
            f"parallelism.fsdp_reshard_after_forward = {reshard_after_forward!r}: valid values are "
            f"{list(_RESHARD_POLICIES)}"
        )
    if all_gather not in ALL_GATHERS:
        raise ValueError(f"{fsdp_comm.AG_KEY} = {all_gather!r}: valid values are {list(ALL_GATHERS)}")
    if reduce_scatter not in REDUCE_SCATTERS:
        raise ValueError(f"{fsdp_comm.RS_KEY} = {reduce_scatter!r}: valid values are {list(REDUCE_SCATTERS)}")
    symmetric = _symmetric_settings(all_gather, reduce_scatter)
    mesh = fsdp_mesh(dims)
    shard_group = (mesh["dp_shard_cp"] if dims.hsdp_enabled else mesh).get_group() if symmetric else None
    for setting in symmetric:  # before anything is sharded
        fsdp_comm.check_symmetric_memory_supported(setting, device_type, shard_group)
    mp = mixed_precision_policy(training, device_type)
    # "default": the last unit's parameters are needed again at once by backward, so keeping them
    # saves one all-gather; the root holds no parameters of its own after the children are wrapped.
    inner = reshard_after_forward != "never"
    last = reshard_after_forward == "always"

    units = []

    def shard(module, reshard: bool) -> None:
        unit = fully_shard(module, mesh=mesh, mp_policy=mp, reshard_after_forward=reshard,
                           ignored_params=ignored_params or None)
        units.append(unit[0] if isinstance(unit, list) else unit)  # a list of modules shares one unit

    if getattr(model, "tok_embeddings", None) is not None:
        shard(model.tok_embeddings, inner)
    for block in model.layers.values():
        shard(block, inner)
    tail = [m for m in (getattr(model, "norm", None), getattr(model, "output", None)) if m is not None]
    if tail:
        shard(tail, last)
    shard(model, last)
    units.pop()  # the root's unit: it holds no parameters of its own, so it gathers nothing

    if prefetch > 1:
        set_prefetch(list(model.layers.values()), prefetch)
    n_units = 0
    for module in model.modules():
        if isinstance(module, FSDPModule):
            module.set_gradient_divide_factor(1.0)
            # Plain SUM collectives: gloo has no PREMUL_SUM, and NCCL's PreMulSum has had bf16 bugs
            # (pytorch#155903); with a factor of 1 nothing needs scaling anyway.
            module.set_force_sum_reduction_for_comms(True)
            n_units += 1
    if symmetric:
        _use_symmetric_memory(units, shard_group, all_gather, reduce_scatter)
    kind = "HSDP" if dims.hsdp_enabled else "FSDP2"
    if not (dims.hsdp_enabled or dims.fsdp_enabled):
        kind = "FSDP2 (mixed precision only; nothing to shard)"
    shape = (f"dp_replicate={dims.dp_replicate} x dp_shard_cp={dims.dp_shard * dims.cp}"
             if dims.hsdp_enabled else f"dp_shard_cp={dims.dp_shard * dims.cp}")
    logger.info(
        "Applied %s over %s: %d FSDP modules, param_dtype=%s reduce_dtype=%s, reshard_after_forward=%s, "
        "gradient divide factor 1 (loss is normalised by the global token count)",
        kind, shape, n_units, str(mp.param_dtype).removeprefix("torch."),
        str(mp.reduce_dtype).removeprefix("torch."), reshard_after_forward,
    )
    return model


def _symmetric_settings(all_gather: str, reduce_scatter: str) -> list[str]:
    """The settings, as the user wrote them, that need NCCL symmetric memory."""
    return ([f"{fsdp_comm.AG_KEY} = 'copy_engine'"] if all_gather == "copy_engine" else []) + (
        [f"{fsdp_comm.RS_KEY} = 'symmetric_memory'"] if reduce_scatter == "symmetric_memory" else [])


def _use_symmetric_memory(units: list, group, all_gather: str, reduce_scatter: str) -> None:
    """Attach the symmetric-memory collectives (checked by apply_fsdp) to every unit."""
    settings = " and ".join(_symmetric_settings(all_gather, reduce_scatter))
    size = dist.get_world_size(group)
    local = int(os.environ.get("LOCAL_WORLD_SIZE", size))
    if size == 1:
        logger.info("%s: no effect, the FSDP shard group has one rank (FSDP gathers and reduces nothing)",
                    settings)
        return
    if size > local:
        logger.warning("%s: the FSDP shard group (%d ranks) spans nodes (%d ranks per node); copy engines "
                       "and NVLink symmetric memory only reach GPUs of the same node, so NCCL falls back to "
                       "its usual kernels across nodes", settings, size, local)
    fsdp_comm.attach_comms(
        units, group,
        all_gather=fsdp_comm.make_symmetric_all_gather() if all_gather == "copy_engine" else None,
        reduce_scatter=fsdp_comm.make_symmetric_reduce_scatter() if reduce_scatter == "symmetric_memory" else None)
    logger.info("%s: %d FSDP units use NCCL symmetric-memory buffers (NCCL_CTA_POLICY=%s)", settings,
                len(units), os.environ.get("NCCL_CTA_POLICY", "unset"))


def set_prefetch(blocks: list[nn.Module], depth: int) -> None:
    """Explicit prefetch: each block's forward all-gathers the next `depth` blocks, each block's
    backward the `depth` blocks before it (in the order backward reaches them)."""
    for i, block in enumerate(blocks):
        block.set_modules_to_forward_prefetch(blocks[i + 1:i + 1 + depth])
        block.set_modules_to_backward_prefetch(blocks[max(i - depth, 0):i][::-1])


def _applies(key: str, active: bool, model: nn.Module, cfg, grad_accum: int) -> bool:
    """Whether parallelism.<key>, an accumulation option set to something other than its default
    (`active`), has anything to act on (logged when not)."""
    if not active:
        return False
    value = getattr(cfg.parallelism, key)
    why = ("one micro-batch per step (set training.global_batch_size above local_batch_size x dp to "
           "accumulate)" if grad_accum == 1 else
           "FSDP is not applied (one rank, fp32)" if not isinstance(model, FSDPModule) else None)
    if why:
        logger.info("parallelism.%s = %s has no effect: %s", key, value, why)
    return why is None


def _unsharded_gib(n_params: int, dims: ParallelDims, dtype: torch.dtype) -> float:
    """GiB of one unsharded copy of this rank's parameters (TP shards stay sharded)."""
    return n_params // dims.tp * torch.finfo(dtype).bits / 8 / 1024**3


def _auto_grad_sync(model: nn.Module, dims: ParallelDims, cfg, grad_accum: int) -> str:
    """What parallelism.fsdp_grad_sync = "auto" means for this run.

    With one rank in FSDP's group (no data parallelism: one GPU, or tensor parallelism alone), FSDP2
    still runs the mixed-precision gradient path after every micro-batch: its "reduce-scatter" only
    copies and casts. Summing the micro-batches unsharded in fp32 instead and reducing once gives the
    same sums bit for bit (checked in deterministic mode on an H200) and 5% more tokens/s on 8 layers
    of Llama-3 8B on one H200 (docs/benchmarks.md 2j). With a bf16 reduce the unsharded sums would
    round in bf16, and with more ranks the reduction order changes: those keep every_micro_batch.
    """
    one_rank = dims.dp_replicate * dims.dp_shard * dims.cp == 1
    fp32 = _dtype("mixed_precision_reduce", cfg.training.mixed_precision_reduce) == torch.float32
    if one_rank and fp32 and grad_accum > 1 and isinstance(model, FSDPModule):
        logger.info("parallelism.fsdp_grad_sync = auto: FSDP has one rank and an fp32 reduce, so the "
                    "micro-batches' gradients are summed unsharded and reduced once per step "
                    "(last_micro_batch; every_micro_batch gives the same sums, more slowly)")
        return "last_micro_batch"
    return "every_micro_batch"


def grad_sync_interval(model: nn.Module, dims: ParallelDims, cfg, grad_accum: int, n_params: int) -> int:
    """How many micro-batches FSDP accumulates unsharded gradients over before one reduce-scatter
    (HSDP: and all-reduce): 1 = after every micro-batch (the default).

    `parallelism.fsdp_grad_sync` = "last_micro_batch" gives grad_accum (once per step),
    "every_N_micro_batches" gives N (after micro-batches N, 2N, ... and always after the last).
    Between reductions FSDP2 keeps each unit's unsharded gradient in the reduce dtype (fp32 by
    default, also for bf16 compute): that saves the other reduce-scatters and their copy-in per unit
    and costs one unsharded gradient copy per rank.
    """
    value = cfg.parallelism.fsdp_grad_sync
    if value == "auto":
        value = _auto_grad_sync(model, dims, cfg, grad_accum)
    match = GRAD_SYNC_EVERY.fullmatch(value)
    every = grad_accum if value == "last_micro_batch" else int(match.group(1)) if match else 1
    every = min(every, grad_accum)
    if not _applies("fsdp_grad_sync", every > 1, model, cfg, grad_accum):
        return 1
    reduce = _dtype("mixed_precision_reduce", cfg.training.mixed_precision_reduce)
    if reduce == torch.bfloat16:
        # FSDP2 keeps the unsharded gradient between micro-batches in the reduce dtype, so the
        # micro-batches' gradients are summed in bf16, rounding at every add.
        logger.warning(
            "parallelism.fsdp_grad_sync = %s with training.mixed_precision_reduce = bfloat16: the "
            "gradients of up to %d micro-batches are summed in bf16 (8 significant bits) before each "
            "reduce (with pairs, a 40-step test on 8 layers of Llama-3 8B ended 5.5%% higher in loss: "
            "docs/benchmarks.md 2e). Set training.mixed_precision_reduce = float32 to accumulate in "
            "fp32, or use fsdp_grad_sync = every_micro_batch (bf16 reduce, fp32 accumulation of the "
            "shards).",
            value, every)
    logger.info(
        "parallelism.fsdp_grad_sync = %s: gradients stay unsharded in %s for up to %d of the %d "
        "micro-batches of a step (up to %.1f GiB per rank) and are reduced %d times per step",
        value, str(reduce).removeprefix("torch."), every, grad_accum, _unsharded_gib(n_params, dims, reduce),
        -(-grad_accum // every))
    return every


def reshard_after_last_backward_only(model: nn.Module, dims: ParallelDims, cfg, grad_accum: int,
                                     n_params: int) -> bool:
    """True when the trainer should keep FSDP's unsharded parameters from one micro-batch to the
    next and free them only after the step's last backward (`parallelism.fsdp_reshard_after_backward
    = "last_micro_batch"`). The optimizer must only ever see them resharded: the unsharded copy is
    an all-gather output that the step does not update, so the last micro-batch always reshards."""
    active = cfg.parallelism.fsdp_reshard_after_backward == "last_micro_batch"
    if not _applies("fsdp_reshard_after_backward", active, model, cfg, grad_accum):
        return False
    param = _dtype("mixed_precision_param", cfg.training.mixed_precision_param)
    extra = "no extra peak memory" if cfg.parallelism.fsdp_reshard_after_forward == "never" else (
        f"up to {_unsharded_gib(n_params, dims, param):.1f} GiB more per rank between micro-batches "
        "(the gathered parameters; fsdp_reshard_after_forward = never makes this free)")
    logger.info("parallelism.fsdp_reshard_after_backward = last_micro_batch: parameters are all-gathered "
                "once per step of %d micro-batches, %s", grad_accum, extra)
    return True
