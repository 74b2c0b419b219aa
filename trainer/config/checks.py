"""Value checks that need no model and no world size: choices, ranges, and pairs of keys.

They run in load_config (so a typo fails before any process group starts) and again in
validate_config (for configs built in code). Each error names where the value came from.
"""

from __future__ import annotations

import math
import os
import re
import warnings
from pathlib import PurePath
from typing import Any, Callable

from trainer.config.fields import ConfigError, format_value, suggest
from trainer.config.loader import source_of
from trainer.config.schema import JobConfig

DTYPES = ("bfloat16", "float32")

# parallelism.fsdp_grad_sync: one of these names, or "every_N_micro_batches"
GRAD_SYNC_NAMES = ("auto", "every_micro_batch", "last_micro_batch")
GRAD_SYNC_EVERY = re.compile(r"every_([1-9][0-9]*)_micro_batches")

# activation_checkpoint.selective_ac_option's per-op policies (trainer/parallel/checkpointing.py);
# any other value is a block interval N.
AC_PER_OP_OPTIONS = ("op", "op_every_other_mm")

CHOICES: dict[str, tuple[str, ...]] = {
    "model.attention": ("sdpa", "triton", "thunderkittens"),
    "training.mixed_precision_param": DTYPES,
    "training.mixed_precision_reduce": DTYPES,
    "parallelism.context_parallel_method": ("ring", "allgather"),
    "parallelism.fsdp_reshard_after_forward": ("default", "always", "never"),
    "parallelism.fsdp_reshard_after_backward": ("every_micro_batch", "last_micro_batch"),
    "parallelism.fsdp_all_gather": ("nccl", "copy_engine"),
    "parallelism.fsdp_reduce_scatter": ("nccl", "symmetric_memory"),
    "activation_checkpoint.mode": ("none", "full", "selective", "memory_budget"),
    "checkpoint.async_mode": ("disabled", "async"),
    "checkpoint.async_writer": ("process", "thread"),
    "optimizer.name": ("AdamW",),
    "lr_scheduler.decay_type": ("linear", "sqrt", "cosine"),
    "float8.recipe": ("tensorwise", "rowwise"),
    "float8.backend": ("torch", "triton", "thunderkittens"),
}


def _inside_run_folder(v: str) -> bool:
    """A relative path that stays inside the run folder: a checkpoint folder elsewhere would be
    shared by every run that names it (a new run would resume another's state), outside the run
    folder's lock."""
    return v != "" and not os.path.isabs(v) and not v.startswith("~") and ".." not in PurePath(v).parts


INSIDE_RUN_FOLDER = "a folder inside the run folder: a relative path without '..'"
# comm timeouts become datetime.timedelta, which stops at 999,999,999 days
MAX_TIMEOUT_S = 10**9  # about 31 years

# key -> (predicate, what is valid). Keys are "section.key".
RANGES: dict[str, tuple[Callable[[Any], bool], str]] = {
    "run.seed": (lambda v: 0 <= v < 2**32, "0 <= seed < 2**32 (numpy's seed range)"),
    "run.name": (lambda v: v != "" and "/" not in v and "\\" not in v and v not in (".", "..")
                 and len(v.encode()) <= 255,
                 "a non-empty folder name without path separators, at most 255 bytes (file systems' limit)"),
    "run.dump_folder": (lambda v: v != "", "a non-empty path"),
    "training.local_batch_size": (lambda v: v >= 1, ">= 1"),
    "training.global_batch_size": (lambda v: v == -1 or v >= 1, "-1 (= local_batch_size x dp) or >= 1"),
    "training.seq_len": (lambda v: v >= 1, ">= 1"),
    "training.steps": (lambda v: v >= 1, ">= 1"),
    "training.max_norm": (lambda v: v >= 0, ">= 0 (0 disables clipping)"),
    "training.gc_freq": (lambda v: v >= 0, ">= 0 (0 = Python's automatic GC)"),
    "activation_checkpoint.selective_ac_option": (
        lambda v: v in AC_PER_OP_OPTIONS or (v.isdigit() and int(v) >= 1),
        f"{', '.join(repr(o) for o in AC_PER_OP_OPTIONS)} or a positive integer N as a string "
        "(checkpoint every N-th block)"),
    "parallelism.fsdp_prefetch": (lambda v: v >= 1, ">= 1 (1 = FSDP2's default: the next block)"),
    "parallelism.fsdp_grad_sync": (
        lambda v: v in GRAD_SYNC_NAMES or GRAD_SYNC_EVERY.fullmatch(v) is not None,
        "auto, every_micro_batch, last_micro_batch or every_N_micro_batches (N >= 1, e.g. "
        "every_2_micro_batches)"),
    "activation_checkpoint.memory_budget": (lambda v: 0 <= v <= 1, "0 <= memory_budget <= 1"),
    "checkpoint.folder": (_inside_run_folder, INSIDE_RUN_FOLDER),
    "checkpoint.interval": (lambda v: v >= 1, ">= 1"),
    "checkpoint.keep_latest_k": (lambda v: v == 0 or v >= 2,
                                 "0 (keep all) or >= 2 (a save in progress must never be the only one)"),
    "checkpoint.load_step": (lambda v: v >= -1, "-1 (newest) or a step >= 0"),
    "metrics.log_freq": (lambda v: v >= 1, ">= 1"),
    "metrics.peak_tflops": (lambda v: v >= 0, ">= 0 (0 = look the device up)"),
    "metrics.gpu_sample_interval": (lambda v: v >= 0, ">= 0 seconds (0 = no GPU clock and power metrics)"),
    "optimizer.lr": (lambda v: v > 0, "> 0"),
    "optimizer.eps": (lambda v: v > 0, "> 0"),
    "optimizer.weight_decay": (lambda v: v >= 0, ">= 0"),
    "optimizer.beta1": (lambda v: 0 <= v < 1, "0 <= beta1 < 1"),
    "optimizer.beta2": (lambda v: 0 <= v < 1, "0 <= beta2 < 1"),
    "lr_scheduler.warmup_steps": (lambda v: v >= 0, ">= 0"),
    "lr_scheduler.decay_ratio": (lambda v: 0 < v <= 1, "0 < decay_ratio <= 1"),
    "lr_scheduler.min_lr_factor": (lambda v: 0 <= v <= 1, "0 <= min_lr_factor <= 1"),
    "data.dataset": (lambda v: v != "", "'embedded' or a folder of token shards"),
    "data.tokenizer": (lambda v: v != "", "'bytes' or a tokenizer.json path"),
    "comm.init_timeout_seconds": (lambda v: 1 <= v <= MAX_TIMEOUT_S, f"1 <= seconds <= {MAX_TIMEOUT_S:,}"),
    "comm.train_timeout_seconds": (lambda v: 1 <= v <= MAX_TIMEOUT_S, f"1 <= seconds <= {MAX_TIMEOUT_S:,}"),
    "comm.trace_buf_size": (lambda v: v >= 0, ">= 0 (0 disables the flight recorder)"),
    "profiling.profile_start_step": (lambda v: v >= 1, ">= 1 (steps are 1-based)"),
    "profiling.profile_steps": (lambda v: v >= 1, ">= 1"),
    "profiling.save_traces_folder": (_inside_run_folder, INSIDE_RUN_FOLDER),
}


# Values a typo of a RANGES key most likely meant (for "did you mean").
LIKELY: dict[str, tuple[str, ...]] = {
    "parallelism.fsdp_grad_sync": (*GRAD_SYNC_NAMES, "every_2_micro_batches"),
}


def get_value(cfg: JobConfig, key: str) -> Any:
    section, name = key.split(".")
    return getattr(getattr(cfg, section), name)


def fail(cfg: JobConfig, key: str, why: str) -> ConfigError:
    """A ConfigError for `key`: '<source>: key = value: why'."""
    return ConfigError(f"{source_of(cfg, key)}: {key} = {format_value(get_value(cfg, key))}: {why}")


def value_problem(key: str, value: Any) -> str | None:
    """Why `value` breaks key's CHOICES or RANGES entry ("must be ..."), or None when it does not."""
    if key in CHOICES:
        return None if value in CHOICES[key] else f"must be one of {' | '.join(CHOICES[key])}"
    ok, valid = RANGES[key]
    # NaN passes no range check; an infinity passes one-sided ones (lr = inf trains one step of nan)
    if isinstance(value, float) and not math.isfinite(value):
        return f"must be a finite number: {valid}"
    return None if ok(value) else f"must be {valid}"


def check_section(section: str, obj: Any) -> None:
    """The CHOICES and RANGES checks of one section object built in code (no file to name), as a
    ValueError: for code that takes a section without its JobConfig (trainer/optim.py)."""
    for key in (*CHOICES, *RANGES):
        owner, name = key.split(".", 1)
        if owner == section:
            value = getattr(obj, name)
            why = value_problem(key, value)
            if why is not None:
                raise ValueError(f"{key} = {value!r}: {why}")


def check_values(cfg: JobConfig) -> None:
    """Raise ConfigError on the first invalid value; warn on legal but suspicious ones."""
    if cfg.lr_scheduler.decay_type == "wsd":
        raise fail(cfg, "lr_scheduler.decay_type",
                   "was removed: decay_ratio now turns every decay_type into warmup-stable-decay, as in "
                   "torchtitan; write decay_type = \"linear\" with decay_ratio = 0.2 (wsd's old default) "
                   "or the ratio you had")
    for key in (*CHOICES, *RANGES):
        value = get_value(cfg, key)
        why = value_problem(key, value)
        if why is None:
            continue
        # A close allowed value as a hint (none for NaN: "nan" resembles nothing allowed).
        likely = CHOICES[key] if key in CHOICES else LIKELY.get(key, ())
        hint = suggest(str(value), list(likely)) if likely and value == value else None
        raise fail(cfg, key, why + (f" (did you mean {hint!r}?)" if hint else ""))
    if cfg.parallelism.enable_async_tensor_parallel and not cfg.compile.enable:
        raise fail(cfg, "parallelism.enable_async_tensor_parallel",
                   "async TP is done by the compiler; set compile.enable = true as well, "
                   "or turn async TP off")
    if cfg.activation_checkpoint.mode == "memory_budget" and not cfg.compile.enable:
        raise fail(cfg, "activation_checkpoint.mode",
                   "the memory budget is met by the compiler's choice of what to recompute; set "
                   "compile.enable = true as well, or use mode = full or selective")
    if not cfg.run.deterministic_fill and not cfg.run.deterministic:
        _warn_once(
            f"run.deterministic_fill = false ({source_of(cfg, 'run.deterministic_fill')}) changes "
            "nothing without run.deterministic = true: torch fills new tensors only in that mode")
    if cfg.checkpoint.async_writer == "process" and cfg.checkpoint.async_mode == "disabled":
        _warn_once(
            f"checkpoint.async_writer = \"process\" ({source_of(cfg, 'checkpoint.async_writer')}) is "
            "ignored: checkpoint.async_mode = \"disabled\" saves while training waits; set "
            "async_mode = \"async\" for a writer process")
    warmup, steps = cfg.lr_scheduler.warmup_steps, cfg.training.steps
    if warmup > steps:
        _warn_once(
            f"lr_scheduler.warmup_steps = {warmup} ({source_of(cfg, 'lr_scheduler.warmup_steps')}) "
            f"> training.steps = {steps}: warm-up is shortened to the run's {steps} steps (torchtitan's "
            "rule), so the lr reaches optimizer.lr at the last step and never decays")


_WARNED: set[str] = set()


def _warn_once(message: str) -> None:
    """A config is checked several times per process (load, validate): say each thing once, on
    rank 0 only, so a 64-rank launch prints one line instead of 128."""
    if message in _WARNED or os.environ.get("RANK", "0") != "0":
        return
    _WARNED.add(message)
    warnings.warn(message, UserWarning, stacklevel=3)
