"""Optimizer, learning-rate schedules and gradient clipping that is correct for any parallel layout."""

from __future__ import annotations

import copy
import math
import os
import warnings
from collections import defaultdict

import torch
import torch.nn as nn
from torch.distributed.tensor import DTensor

from trainer.config.checks import check_section
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


# The LR schedule is torchtitan v0.2.2's (tag v0.2.2 = commit 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce,
# torchtitan/components/lr_scheduler.py: build_lr_schedulers and linear_warmup_stable_decay), written
# for titankit's 1-based optimizer step s (LambdaLR's counter + 1) and T = training.steps:
#   W = min(warmup_steps, T)
#   D = round(decay_ratio x T) (Python's round, half to even), at most T - W; decay_ratio 1 gives T - W
#   s <= W               s / W                       (the last warm-up step already runs at the peak)
#   s <= T + 1 - D       1                           (stable; with D = T - W only step W + 1)
#   otherwise            p = (s - (T + 1 - D)) / D   (1/D at the first decay step, (D-1)/D at s = T)
#                        min_lr_factor + (1 - min_lr_factor) x {linear: 1 - p, sqrt: 1 - sqrt(p),
#                                                           cosine: (1 + cos(pi p)) / 2}
# torchtitan's "virtual last step": the floor is reached at s = T + 1, so the last step trained runs
# just above it. D = 0 (a tiny decay_ratio) means no decay at all. Deliberate differences, none of
# which changes a step s <= T + 1: decay_ratio's "unset" is spelled 1.0 (TOML has no null; torchtitan
# computes the same D for None and 1.0); p is clamped to 1 past s = T + 1 (torchtitan would go below
# the floor for linear and sqrt, back up for cosine) and D = 0 returns 1 there (torchtitan asserts);
# there is no lr_scheduler.total_steps (T is training.steps).


# progress p in [0, 1] -> the decay's shape, 1 at p = 0 and 0 at p = 1
LR_DECAY_SHAPES = {
    "linear": lambda p: 1.0 - p,
    "sqrt": lambda p: 1.0 - math.sqrt(p),
    "cosine": lambda p: 0.5 * (1.0 + math.cos(math.pi * p)),
}


def _phases(total_steps: int, cfg: LRConfig) -> tuple[int, int]:
    """(W, D): warm-up and decay steps of a run of total_steps steps."""
    warmup = min(cfg.warmup_steps, total_steps)
    return warmup, min(round(total_steps * cfg.decay_ratio), total_steps - warmup)


def lr_factor(step: int, total_steps: int, cfg: LRConfig) -> float:
    """Multiplier of the peak lr at optimizer step `step` (1-based, the step about to be taken):
    torchtitan v0.2.2's warmup-stable-decay schedule (see the comment above)."""
    warmup, decay = _phases(total_steps, cfg)
    if step <= warmup:
        return step / warmup
    decay_start = total_steps + 1 - decay  # the last stable step
    if step <= decay_start or decay == 0:
        return 1.0
    progress = min((step - decay_start) / decay, 1.0)
    return cfg.min_lr_factor + (1.0 - cfg.min_lr_factor) * LR_DECAY_SHAPES[cfg.decay_type](progress)


def build_lr_scheduler(optimizer: torch.optim.Optimizer, total_steps: int,
                       cfg: LRConfig) -> torch.optim.lr_scheduler.LambdaLR:
    check_section("lr_scheduler", cfg)  # a config built in code has not been through load_config
    warmup, decay = _phases(total_steps, cfg)
    ratio = cfg.decay_ratio
    if ratio < 1 and decay < round(total_steps * ratio) and os.environ.get("RANK", "0") == "0":
        warnings.warn(  # torchtitan logs the same adjustment
            f"lr_scheduler.decay_ratio = {ratio!r}: round({ratio!r} x training.steps = {total_steps}) "
            f"decay steps overlap the {warmup} warm-up steps; decaying over the {decay} steps after "
            "warm-up instead", UserWarning, stacklevel=2)
    elif decay == 0 and warmup < total_steps and os.environ.get("RANK", "0") == "0":
        warnings.warn(
            f"lr_scheduler.decay_ratio = {ratio!r} of training.steps = {total_steps} rounds to 0 decay "
            "steps: the lr stays at optimizer.lr after warm-up", UserWarning, stacklevel=2)
    # LambdaLR calls the lambda with its own counter starting at 0 for the first step's lr.
    return torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda i: lr_factor(i + 1, total_steps, cfg))


# Param-group keys that say how AdamW runs, not what it computes: restored without a message.
_IMPLEMENTATION_KEYS = ("foreach", "fused", "capturable", "differentiable")
_CONFIG_KEYS = {"weight_decay": "optimizer.weight_decay", "betas": "optimizer.beta1 / beta2",
                "eps": "optimizer.eps"}


def config_hyperparameters(optimizer: torch.optim.Optimizer,
                           scheduler: torch.optim.lr_scheduler.LRScheduler) -> dict:
    """The hyperparameters this run built from its config, taken before a checkpoint's optimizer and
    schedule state replace them (see keep_config_hyperparameters)."""
    groups = [{k: copy.deepcopy(v) for k, v in g.items() if k not in ("params", "lr", "initial_lr")}
              for g in optimizer.param_groups]
    return {"groups": groups, "base_lrs": list(scheduler.base_lrs)}


def _plain(value):
    """Comparable form: a checkpoint may return a tuple as a list."""
    return tuple(value) if isinstance(value, (list, tuple)) else value


def keep_config_hyperparameters(optimizer: torch.optim.Optimizer,
                                scheduler: torch.optim.lr_scheduler.LRScheduler, built: dict) -> list[str]:
    """After a checkpoint's optimizer and schedule state were loaded: the Adam moments and the step
    count stay the checkpoint's, every hyperparameter is this run's config again.

    Loading restores the saved param groups (lr, weight decay, betas, eps) and the schedule's peak
    lrs, so a resume with a lower optimizer.lr, another weight decay or a longer training.steps would
    otherwise keep the old values silently (and the first resumed step would take the lr the old
    schedule computed for it). The lr of the next step is recomputed from this run's schedule at the
    checkpoint's step: with an unchanged config it is the same float the checkpoint holds, so an
    exact resume stays exact. Returns one line per value that differs from the checkpoint's.
    """
    changes: dict[str, tuple] = {}  # message key -> (checkpoint value, config value)
    for group, values, base in zip(optimizer.param_groups, built["groups"], built["base_lrs"], strict=True):
        for key, value in values.items():
            if key not in _IMPLEMENTATION_KEYS and _plain(group.get(key)) != _plain(value):
                changes.setdefault(_CONFIG_KEYS.get(key, f"AdamW's {key}"), (group.get(key), value))
            group[key] = value
        group["initial_lr"] = base
    for old, new in zip(scheduler.base_lrs, built["base_lrs"], strict=True):
        if old != new:
            changes.setdefault("optimizer.lr", (old, new))
    scheduler.base_lrs = list(built["base_lrs"])
    if isinstance(scheduler, torch.optim.lr_scheduler.LambdaLR):
        lrs = [base * fn(scheduler.last_epoch) for fn, base in zip(scheduler.lr_lambdas, scheduler.base_lrs)]
        for group, lr in zip(optimizer.param_groups, lrs):
            if group["lr"] != lr:
                changes.setdefault(f"the lr of the next step (step {scheduler.last_epoch + 1}; "
                                   "optimizer.lr, training.steps, lr_scheduler)", (group["lr"], lr))
            group["lr"] = lr
        scheduler._last_lr = lrs

    def show(v):
        return f"{v:.6g}" if isinstance(v, float) else repr(v)

    return [f"{name}: {show(old)} in the checkpoint, {show(new)} now" for name, (old, new) in changes.items()]


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
