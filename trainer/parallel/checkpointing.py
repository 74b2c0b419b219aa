"""Activation checkpointing: trade recomputation for activation memory, block by block.

Modes (`[activation_checkpoint]`):
  none                        keep every activation
  full                        keep only each block's input; recompute the whole block in backward
  selective, option "op"      per-op policy (torch.utils.checkpoint selective checkpointing): keep the
                              outputs of dense and FP8 matmuls (aten's and our kernels' custom ops),
                              attention kernels and TP reduce-scatters (expensive to recompute),
                              recompute the cheap element-wise rest (norms, SwiGLU, RoPE, residual
                              adds, FP8 quantization) and MoE grouped GEMMs (measured faster)
  selective, option "N"       full checkpointing of every N-th block (blocks 0, N, 2N, ...)
  memory_budget               no wrapping: the compiled blocks keep at most `memory_budget` of their
                              no-AC activation memory, and the compiler's partitioner recomputes
                              the ops that are cheapest per byte saved (torch._functorch's
                              activation_memory_budget); needs compile.enable

Blocks are wrapped with `checkpoint_wrapper` (non-reentrant), so wrapped parameter names gain a
`_checkpoint_wrapped_module.` segment that the model's `canonical_fqn` and DCP's state_dict strip.
Context-parallel attention is a custom op: per-op selective checkpointing saves its output like any
attention output, and full checkpointing re-runs it (and its communication) in the same order on
every rank.
"""

from __future__ import annotations

import functools
import logging

import torch
from torch import nn
from torch.distributed.algorithms._checkpoint.checkpoint_wrapper import (
    CheckpointImpl,
    checkpoint_wrapper,
)
from torch.utils.checkpoint import CheckpointPolicy, create_selective_checkpoint_contexts

from trainer.config.checks import AC_PER_OP_OPTIONS

logger = logging.getLogger("titankit")

MODES = ("none", "full", "selective", "memory_budget")
PER_OP_OPTIONS = AC_PER_OP_OPTIONS  # "op", then torchtitan's rule
OP_EVERY_OTHER_MM = PER_OP_OPTIONS[1]


def _save_list() -> set:
    """aten/c10d ops whose outputs selective checkpointing keeps (by overload packet)."""
    aten = torch.ops.aten
    ops = {
        aten.mm,
        aten.addmm,
        aten._scaled_mm,
        aten._scaled_dot_product_flash_attention,
        aten._scaled_dot_product_flash_attention_for_cpu,
        aten._scaled_dot_product_efficient_attention,
        aten._scaled_dot_product_cudnn_attention,
    }
    # TP's reduce-scatter after wo/w2: recomputing it would repeat the communication.
    ops.add(torch.ops._c10d_functional.reduce_scatter_tensor)
    return ops


# Our kernel packages' FP8 GEMM ops, by name (importing them here would pull in Triton and the TK
# extension). Before they were listed, the per-op policy re-ran every forward FP8 GEMM of
# float8.backend = "triton" / "thunderkittens" in backward, which aten._scaled_mm (backend "torch")
# never did: 108 instead of 84 GEMM launches per step for a 4-layer Llama-3 8B on an H200.
# MoE grouped GEMMs (aten._grouped_mm, titankit::grouped_mm) stay recomputed: saving them made a
# 4-layer moe_16b on one H200 slower, its host-bound step 51 ms longer (docs/benchmarks.md 5c).
_SAVED_CUSTOM_GEMMS = ("titankit::fp8_gemm", "titankit::tk_fp8_gemm_rowwise")


def _is_saved_custom_op(func) -> bool:
    """Our kernels' forward attention ops (e.g. titankit::flash_attn_fwd) are as dear as SDPA's,
    and their GEMMs as aten's."""
    name = func.name() if hasattr(func, "name") else str(func)
    if not name.startswith("titankit::"):
        return False
    return name.split(".")[0] in _SAVED_CUSTOM_GEMMS or "attn_fwd" in name or "attention_fwd" in name


def op_policy(save_ops: set, every_other_mm: bool = False):
    """Policy for create_selective_checkpoint_contexts: save `save_ops` and our kernels' attention
    and GEMM ops, recompute the rest.

    every_other_mm: torchtitan v0.2.2's rule for aten.mm (torchtitan/distributed/activation_checkpoint.py):
    of a block's dense matmuls, in call order, the 1st, 3rd, ... are saved and the 2nd, 4th, ...
    recomputed. The forward and the recompute count separately, so both pick the same ones. FP8 and
    our custom GEMMs stay saved either way (torchtitan v0.2.2 saves none of them; recomputing them
    cost 5% of a step, docs/benchmarks.md 5c). One policy per block forward: a fresh count each.
    """
    counts = {False: 0, True: 0}  # by ctx.is_recompute

    def policy(ctx, func, *args, **kwargs):
        packet = getattr(func, "overloadpacket", None)
        if every_other_mm and packet is torch.ops.aten.mm:
            counts[ctx.is_recompute] += 1
            if counts[ctx.is_recompute] % 2 == 0:
                return CheckpointPolicy.PREFER_RECOMPUTE
        if packet in save_ops or _is_saved_custom_op(func):
            return CheckpointPolicy.MUST_SAVE
        return CheckpointPolicy.PREFER_RECOMPUTE

    return policy


def _selective_context(every_other_mm: bool = False):
    return create_selective_checkpoint_contexts(op_policy(_save_list(), every_other_mm))


def _recompute_everything(ctx, func, *args, **kwargs):
    return CheckpointPolicy.PREFER_RECOMPUTE


def _full_context():
    # Full checkpointing of a compiled block, expressed as a selective policy that saves nothing.
    # Why not plain checkpoint: under torch.compile, torch 2.11 tags the ops of a checkpointed region
    # for recomputation before custom autograd.Functions are inlined, so the ops inside
    # Float8Linear's matmul stay untagged and the partitioner saves their outputs
    # (pytorch/pytorch#177396): full AC with FP8 kept every GEMM output, as much activation memory as
    # no AC (measured on H200: docs/benchmarks.md section 10). The selective path tags each op as it
    # is traced, inlined ones included. In eager, plain checkpoint is kept: it recomputes everything
    # anyway, stops early, and has no per-op Python dispatch.
    return create_selective_checkpoint_contexts(_recompute_everything)


def _wrap(block: nn.Module, per_op: str | None, compiled: bool) -> nn.Module:
    """per_op: the selective_ac_option of a per-op policy ("op" or "op_every_other_mm"), else None."""
    if per_op is not None:
        context_fn = functools.partial(_selective_context, per_op == OP_EVERY_OTHER_MM)
    else:
        context_fn = _full_context if compiled else None
    kwargs = {"context_fn": context_fn} if context_fn is not None else {}
    # preserve_rng_state=False: blocks hold no dropout, and stashing RNG costs a device sync.
    return checkpoint_wrapper(block, checkpoint_impl=CheckpointImpl.NO_REENTRANT,
                              preserve_rng_state=False, **kwargs)


def compile_memory_budget(ac) -> float:
    """The activation memory budget the compiled blocks get: ac.memory_budget in memory_budget mode,
    else 1.0 (keep everything; any other mode's recomputation is done by the wrappers above)."""
    return ac.memory_budget if ac.mode == "memory_budget" else 1.0


def parse_ac(ac) -> tuple[str, int | None]:
    """Validated (mode, every_n): every_n is set for "selective" with an integer option."""
    if ac.mode not in MODES:
        raise ValueError(f"activation_checkpoint.mode = {ac.mode!r}: valid values are {list(MODES)}")
    if ac.mode != "selective" or ac.selective_ac_option in PER_OP_OPTIONS:
        return ac.mode, None
    option = str(ac.selective_ac_option)
    if not option.isdigit() or int(option) < 1:
        raise ValueError(
            f"activation_checkpoint.selective_ac_option = {ac.selective_ac_option!r}: valid values "
            f"are {' or '.join(repr(o) for o in PER_OP_OPTIONS)} (per-op policies) or a positive "
            "integer N (checkpoint every N-th block)"
        )
    return ac.mode, int(option)


def apply_ac(model: nn.Module, ac, compiled: bool = False) -> nn.Module:
    """Wrap the blocks of `model.layers` in place according to the `[activation_checkpoint]` section;
    `compiled`: the blocks will be compiled (apply_compile), which changes how full AC is expressed."""
    mode, every_n = parse_ac(ac)
    if mode == "none":
        return model
    if mode == "memory_budget":  # nothing to wrap: apply_compile hands the budget to the compiler
        logger.info("Activation checkpointing by the compiler: memory budget %.2f of the no-AC "
                    "activations of each compiled block", ac.memory_budget)
        return model
    wrapped = 0
    for i, (name, block) in enumerate(list(model.layers.items())):
        if mode == "selective" and every_n is not None and i % every_n != 0:
            continue
        per_op = ac.selective_ac_option if mode == "selective" and every_n is None else None
        model.layers[name] = _wrap(block, per_op=per_op, compiled=compiled)
        wrapped += 1
    saved = ("every other dense matmul output as torchtitan does, every FP8 GEMM and attention output"
             if ac.selective_ac_option == OP_EVERY_OTHER_MM else "matmul and attention outputs")
    what = {"full": "full", "selective": f"selective per-op (save {saved})"}[mode]
    if every_n is not None:
        what = f"full on every {every_n}-th block"
    logger.info("Applied activation checkpointing: %s, %d of %d blocks", what, wrapped,
                len(model.layers))
    return model
