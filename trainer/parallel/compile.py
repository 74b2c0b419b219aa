"""Per-block torch.compile.

Each block is compiled in place with `nn.Module.compile()`, so module and parameter names are
unchanged (no `_orig_mod.` segment) and FSDP, applied afterwards, wraps the compiled blocks.
Context-parallel attention is a custom op (titankit::cp_attention_fwd/bwd) with its communication
inside, so a compiled block stays one graph.
"""

from __future__ import annotations

import logging

import torch
from torch import nn

logger = logging.getLogger("titankit")


def apply_compile(model: nn.Module, memory_budget: float = 1.0) -> nn.Module:
    """Compile every block of `model.layers` in place (inductor, default mode).

    memory_budget < 1 (activation_checkpoint.mode = "memory_budget") lets the partitioner recompute
    in backward what it needs to keep at most that share of each graph's activations. The setting is
    process-wide and read when a graph is first compiled (its first call), so it is set here for
    every model, 1.0 (keep all) included: a second model in one process does not inherit it.
    """
    import torch._functorch.config as functorch_config

    functorch_config.activation_memory_budget = float(memory_budget)
    for block in model.layers.values():
        block.compile()
    logger.info("Applied torch.compile to each of %d blocks (torch %s)%s", len(model.layers),
                torch.__version__, f", activation memory budget {memory_budget:g}" if memory_budget < 1 else "")
    return model


def compile_loss(fn):
    """The trainer's loss function, compiled (the (B, S, V) logits make the CE worth fusing)."""
    return torch.compile(fn)
