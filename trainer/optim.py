"""Optimizer, learning-rate schedules and gradient clipping that is correct for any parallel layout."""

from __future__ import annotations

import math
from collections import defaultdict

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from trainer.config.schema import LRScheduler as LRConfig
from trainer.config.schema import Optimizer as OptConfig


def build_optimizer(model: nn.Module, cfg: OptConfig, device_type: str) -> torch.optim.Optimizer:
    """AdamW; weight decay only on matrices (norm weights are 1-D and stay undecayed)."""
    if cfg.name != "AdamW":
        raise ValueError(f"optimizer.name = {cfg.name!r}: only 'AdamW' is implemented")
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    groups = [{"params": decay, "weight_decay": cfg.weight_decay},
              {"params": no_decay, "weight_decay": 0.0}]
    # fused=True is the fastest AdamW on CUDA, works on DTensor params, and takes the gradient clip
    # into its kernel (clip_grads_). CPU keeps foreach: CPU's fused AdamW splits each tensor into
    # vector and scalar-tail loops, so a sharded and an unsharded parameter can round differently
    # (FP8 under TP 2 then drifted 4.5e-5 from 1 rank in tests/distributed; foreach stays within 1e-5).
    fused = device_type == "cuda"
    return torch.optim.AdamW(groups, lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
                             fused=fused, foreach=None if fused else True)


def lr_factor(step: int, total_steps: int, cfg: LRConfig) -> float:
    """Multiplier of the peak lr at optimizer step `step` (1-based, the step about to be taken).

    Linear warmup from 1/(warmup+1) over `warmup_steps`; the step after warmup runs at the peak;
    then decay to min_lr_factor at the last step: cosine, linear, or wsd (warmup-stable-decay:
    the peak until the last decay_ratio x total_steps steps, then linear).
    """
    warmup = cfg.warmup_steps
    if step <= warmup:
        return step / (warmup + 1)
    floor = cfg.min_lr_factor
    if cfg.decay_type == "wsd":
        decay_steps = min(max(1, int(round(cfg.decay_ratio * total_steps))), total_steps - warmup)
        start = total_steps - decay_steps
        if step <= start:
            return 1.0
        progress = (step - start) / decay_steps
        return 1.0 - (1.0 - floor) * min(progress, 1.0)
    # progress 0 at the first step after warmup, 1 at the last step
    progress = min((step - warmup - 1) / max(1, total_steps - warmup - 1), 1.0)
    if cfg.decay_type == "linear":
        return 1.0 - (1.0 - floor) * progress
    if cfg.decay_type == "cosine":
        return floor + (1.0 - floor) * 0.5 * (1.0 + math.cos(math.pi * progress))
    raise ValueError(f"lr_scheduler.decay_type = {cfg.decay_type!r}: valid are cosine, linear, wsd")


def build_lr_scheduler(optimizer: torch.optim.Optimizer, total_steps: int,
                       cfg: LRConfig) -> torch.optim.lr_scheduler.LambdaLR:
    # LambdaLR calls the lambda with its own counter starting at 0 for the first step's lr.
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i + 1, total_steps, cfg))


def _placement_key(p: torch.Tensor):
    if isinstance(p, DTensor):
        return (id(p.device_mesh), tuple(p.placements))
    return None


def _grad_groups(params: list[torch.Tensor]) -> list[list[torch.Tensor]]:
    """Grads grouped by (mesh, placements): one foreach call per group."""
    groups: dict = defaultdict(list)
    for p in params:
        if p.grad is not None:
            groups[_placement_key(p.grad)].append(p.grad)
    return list(groups.values())


@torch.no_grad()
def grad_norm(params: list[torch.Tensor]) -> torch.Tensor:
    """Global L2 norm over all grads, as a plain fp32 tensor, for any parallel layout.

    Grads living on different meshes or placements (FSDP x TP, expert weights on their own mesh)
    cannot be reduced in one foreach call, so the norm is computed per group of equal placement,
    each group made a full (global) value, and the groups combined.
    """
    total_sq = None
    for grads in _grad_groups(params):
        norm = torch.nn.utils.get_total_norm(grads, norm_type=2.0, foreach=True)
        if isinstance(norm, DTensor):
            norm = norm.full_tensor()
        sq = norm.float() ** 2
        total_sq = sq if total_sq is None else total_sq + sq
    return torch.zeros(()) if total_sq is None else total_sq.sqrt()


@torch.no_grad()
def scale_grads_(params: list[torch.Tensor], factor: float) -> None:
    """Multiply every grad by `factor`, on local shards: exact for any placement."""
    for grads in _grad_groups(params):
        torch._foreach_mul_([g.to_local() if isinstance(g, DTensor) else g for g in grads], factor)


def clip_grads_(optimizer: torch.optim.Optimizer, params: list[torch.Tensor], factor: float | None) -> None:
    """Scale every grad by `factor` (None: leave them) for the coming optimizer.step().

    A fused AdamW divides each grad by its `grad_scale` tensor inside its own kernel (the hook
    GradScaler uses to unscale), so the clip costs no extra pass: on Llama-3 8B under FSDP 2 that
    pass reads and writes 16 GB of fp32 grads per rank. Other optimizers get a foreach multiply. Call it before
    every step: it also clears a scale left from the step before.
    """
    if optimizer.defaults.get("fused"):
        if factor is None:
            optimizer.grad_scale = None
        else:
            device = next(p.device for p in params if p.grad is not None)
            optimizer.grad_scale = torch.full((), 1.0 / factor, dtype=torch.float32, device=device)
    elif factor is not None:
        scale_grads_(params, factor)
