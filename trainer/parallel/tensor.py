"""Tensor + sequence parallelism (Megatron-LM, Shoeybi et al. 2019; Korthikanti et al. 2022) with DTensor.

Between blocks the activations are sharded on the sequence dim over the TP ranks (SP): norms run on
their sequence shard; before attention / feed-forward the shards are all-gathered, the column-
parallel wq/wk/wv/w1/w3 produce a slice of the heads / hidden units, and the row-parallel wo/w2
reduce-scatter back to sequence shards. The model derives head counts from the weight shapes
(`view(b, s, -1, head_dim)`), so nothing in it needs adjusting after sharding.

With loss parallel the logits stay a DTensor sharded on the vocab dim and the trainer computes the
cross entropy under `torch.distributed.tensor.parallel.loss_parallel()`: the (B, S, V) logits are
never gathered.

Async TP (`parallelism.enable_async_tensor_parallel`, CUDA + torch.compile): inductor's micro-
pipeline pass rewrites all-gather + matmul and matmul + reduce-scatter into fused symmetric-memory
ops that overlap communication with compute. It needs symmetric memory registered for the TP group,
or the rewrite silently does not happen; `check_async_tp` tells whether the fused ops really ran.
"""

from __future__ import annotations

import logging
from typing import Iterable

import torch
from torch import nn
from torch.distributed.tensor import Replicate, Shard
from torch.distributed.tensor.parallel import (
    ColwiseParallel,
    ParallelStyle,
    PrepareModuleInput,
    RowwiseParallel,
    SequenceParallel,
    parallelize_module,
)

logger = logging.getLogger("titankit")

# The ops inductor's micro-pipeline TP pass substitutes (torch/distributed/_symmetric_memory).
ASYNC_TP_OPS = (
    "fused_all_gather_matmul",
    "fused_all_gather_scaled_matmul",
    "fused_matmul_reduce_scatter",
    "fused_scaled_matmul_reduce_scatter",
)


def _own_storage(module: nn.Module, args, output: torch.Tensor) -> torch.Tensor:
    """Forward hook: a copy of `output` when it is a view (see EmbeddingRowwiseParallel)."""
    return output.clone() if output._is_view() else output


class EmbeddingRowwiseParallel(RowwiseParallel):
    """RowwiseParallel whose local output is a fresh tensor rather than a view.

    The embedding's sequence shard comes out of DTensor.to_local() as a view, and FSDP warns that
    the pre-backward hook it hangs on a view output can be lost. With tp=2 + compile (torch 2.13,
    CPU) the embedding gradient was indeed wrong; returning a copy (B x S/tp x dim, cheap) fixes it
    (tests/distributed/test_layouts.py, layout tp2_compile).
    """

    def _apply(self, module: nn.Module, device_mesh) -> nn.Module:
        module = super()._apply(module, device_mesh)
        module.register_forward_hook(_own_storage)  # runs after RowwiseParallel's output hook
        return module


def llama_tp_plan(loss_parallel: bool) -> tuple[dict[str, ParallelStyle], dict[str, ParallelStyle]]:
    """(plan of the top-level modules, plan of every block), module name -> style."""
    top = {
        # Token ids are replicated; each rank owns a vocab slice of the table, and the partial
        # embeddings are reduce-scattered straight into sequence shards (B, S/tp, dim).
        "tok_embeddings": EmbeddingRowwiseParallel(input_layouts=Replicate(),
                                                   output_layouts=Shard(1)),
        "norm": SequenceParallel(),
        # (B, S/tp, dim) -> all-gather -> logits (B, S, V/tp) per rank.
        "output": ColwiseParallel(
            input_layouts=Shard(1),
            output_layouts=Shard(-1) if loss_parallel else Replicate(),
            use_local_output=not loss_parallel,
        ),
    }
    block = {
        "attention_norm": SequenceParallel(),
        # attention(x, rope, doc_ids): gather x's sequence shards once for wq, wk and wv.
        "attention": PrepareModuleInput(
            input_layouts=(Shard(1), None, None), desired_input_layouts=(Replicate(), None, None)
        ),
        "attention.wq": ColwiseParallel(),
        "attention.wk": ColwiseParallel(),
        "attention.wv": ColwiseParallel(),
        "attention.wo": RowwiseParallel(output_layouts=Shard(1)),
        "ffn_norm": SequenceParallel(),
        "feed_forward": PrepareModuleInput(
            input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
        ),
        "feed_forward.w1": ColwiseParallel(),
        "feed_forward.w2": RowwiseParallel(output_layouts=Shard(1)),
        "feed_forward.w3": ColwiseParallel(),
    }
    return top, block


def enable_async_tp(tp_mesh, device_type: str, compile_enabled: bool) -> None:
    """Turn on inductor's micro-pipeline TP and register symmetric memory for the TP group."""
    if device_type != "cuda":
        raise ValueError(
            "parallelism.enable_async_tensor_parallel = true needs CUDA (symmetric memory); this run "
            f"is on {device_type}"
        )
    if not compile_enabled:
        raise ValueError(
            "parallelism.enable_async_tensor_parallel = true needs compile.enable = true (the "
            "overlap is an inductor graph rewrite)"
        )
    import torch._inductor.config as inductor_config
    from torch.distributed._symmetric_memory import enable_symm_mem_for_group

    inductor_config._micro_pipeline_tp = True
    enable_symm_mem_for_group(tp_mesh.get_group().group_name)


def apply_tp(
    model: nn.Module,
    tp_mesh,
    *,
    loss_parallel: bool,
    async_tp: bool = False,
    compile_enabled: bool = False,
    device_type: str = "cpu",
) -> nn.Module:
    """Shard the llama-shaped `model` over `tp_mesh` with the plan of `llama_tp_plan`."""
    if async_tp:
        enable_async_tp(tp_mesh, device_type, compile_enabled)
    top, block = llama_tp_plan(loss_parallel)
    parallelize_module(model, tp_mesh, top)
    for layer in model.layers.values():
        parallelize_module(layer, tp_mesh, block)
    logger.info(
        "Applied tensor + sequence parallelism over tp=%d to %d blocks (loss parallel %s, async TP %s)",
        tp_mesh.size(), len(model.layers), "on" if loss_parallel else "off",
        "on" if async_tp else "off",
    )
    return model


def _names(source) -> list[str]:
    """Op/kernel names of a finished torch.profiler.profile, or the given strings (e.g. the
    generated code returned by torch._inductor.utils.run_and_get_code)."""
    if hasattr(source, "key_averages"):
        return [evt.key for evt in source.key_averages()]
    if isinstance(source, str):
        return [source]
    return [str(s) for s in source]


def async_tp_fused_ops(source) -> dict[str, int]:
    """How often each fused async-TP op appears in `source` (profiler or code strings)."""
    counts = {op: 0 for op in ASYNC_TP_OPS}
    for text in _names(source):
        for op in ASYNC_TP_OPS:
            counts[op] += text.count(op)
    return counts


def check_async_tp(source: object | Iterable[str]) -> bool:
    """True when the fused async-TP ops were used; otherwise one warning saying the overlap is off.

    `source` is a torch.profiler.profile that ran at least one compiled train step, or the generated
    inductor code (strings) of a compiled block, e.g.
        _, code = torch._inductor.utils.run_and_get_code(trainer.train_step)  # first step
        check_async_tp(code)
    """
    counts = async_tp_fused_ops(source)
    if sum(counts.values()) == 0:
        logger.warning(
            "Async TP is enabled but none of %s appear in the compiled code / profile: the "
            "all-gather/reduce-scatter were not fused with the matmuls (check that symmetric memory "
            "is enabled for the TP group and that the blocks were compiled)",
            ", ".join(ASYNC_TP_OPS),
        )
        return False
    logger.info("Async TP fused ops in use: %s",
                ", ".join(f"{op} x{n}" for op, n in counts.items() if n))
    return True
