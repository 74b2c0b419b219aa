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


def apply_compile(model: nn.Module) -> nn.Module:
    """Compile every block of `model.layers` in place (inductor, default mode)."""
    for block in model.layers.values():
        block.compile()
    logger.info("Applied torch.compile to each of %d blocks (torch %s)", len(model.layers),
                torch.__version__)
    return model


def compile_loss(fn):
    """The trainer's loss function, compiled (the (B, S, V) logits make the CE worth fusing)."""
    return torch.compile(fn)
