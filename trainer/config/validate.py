"""Checks that need the world size or the model: the mesh, the batch rule, model name/flavor/overrides.

validate_config(cfg, world_size) is what the trainer (and `python -m trainer.config`) calls before
any process group starts; it returns the ParallelDims so the same degrees are used afterwards.
"""

from __future__ import annotations

import dataclasses
import os
import typing
from pathlib import Path
from typing import Any

from trainer.config.checks import check_values
from trainer.config.fields import (
    COMMAND_LINE,
    ConfigError,
    expected_phrase,
    format_value,
    parse_scalar_text,
    suggest,
)
from trainer.config.loader import source_of
from trainer.config.schema import JobConfig

if typing.TYPE_CHECKING:
    from trainer.parallel.dims import ParallelDims


def _family(cfg: JobConfig) -> Any:
    from trainer.models import FAMILIES  # lazily: loading a config must not import torch

    name = cfg.model.name
    if name not in FAMILIES:
        hint = suggest(name, list(FAMILIES))
        raise ConfigError(
            f"{source_of(cfg, 'model.name')}: model.name = {format_value(name)}: unknown model "
            f"family{f' (did you mean {hint!r}?)' if hint else ''}; valid: {', '.join(FAMILIES)}"
        )
    return FAMILIES[name]


def _typed_in_files(cfg: JobConfig, args_cls: type) -> None:
    """A TOML file is typed, so [model.overrides] n_layers = "3" is refused as training.steps = "3"
    is (fields.coerce), naming the file and key. The command line is text: its values are parsed
    there (cli.py) and converted by ModelFamily.make_args, as are those set in code (source
    "default"). "none" stays TOML's spelling of None (TOML has no null): the resolved config.toml
    writes an n_kv_heads = none override that way."""
    hints = typing.get_type_hints(args_cls)
    for key, value in cfg.model.overrides.items():
        where = source_of(cfg, f"model.overrides.{key}")
        if not isinstance(value, str) or where in (COMMAND_LINE, "default"):
            continue
        options = typing.get_args(hints[key]) or (hints[key],)
        optional = type(None) in options
        if str in options or (optional and value.strip().lower() == "none"):
            continue
        kinds = [k for k in options if k is not type(None)]
        expected = " or ".join(expected_phrase(k) for k in kinds) + (' or "none"' if optional else "")
        parsed = parse_scalar_text(value)
        fits = any(isinstance(parsed, k) and (k is bool) == isinstance(parsed, bool) for k in kinds) or (
            float in kinds and isinstance(parsed, int) and not isinstance(parsed, bool))
        fix = f"; write {key} = {format_value(parsed)} (without quotes)" if fits else ""
        raise ConfigError(f"{where}: model.overrides.{key} = {format_value(value)}: expected {expected} "
                          f"(a TOML string is not converted){fix}")


def resolve_model_args(cfg: JobConfig) -> Any:
    """The model args of cfg.model.flavor with cfg.model.overrides applied.

    The model family converts and applies the overrides (ModelFamily.make_args); this adds where each
    value came from and the closest valid name to its errors.
    """
    family = _family(cfg)
    flavor = cfg.model.flavor
    if flavor not in family.flavors:
        hint = suggest(flavor, list(family.flavors))
        from trainer.models import FAMILIES

        # A flavor of another family (moe_debug under llama3) means the name is what is wrong.
        owner = next((n for n, f in FAMILIES.items() if flavor in f.flavors), None)
        if owner is not None:
            raise ConfigError(
                f"{source_of(cfg, 'model.flavor')}: model.flavor = {format_value(flavor)} is a flavor "
                f"of model.name = \"{owner}\", and model.name is \"{cfg.model.name}\" "
                f"({source_of(cfg, 'model.name')}); set model.name = \"{owner}\", or a flavor of "
                f"{cfg.model.name}: {', '.join(family.flavors)}")
        raise ConfigError(
            f"{source_of(cfg, 'model.flavor')}: model.flavor = {format_value(flavor)}: not a flavor "
            f"of {cfg.model.name}{f' (did you mean {hint!r}?)' if hint else ''}; "
            f"valid: {', '.join(family.flavors)}"
        )
    fields = [f.name for f in dataclasses.fields(family.args_cls) if f.init]
    for key in cfg.model.overrides:
        if key not in fields:
            hint = suggest(key, fields)
            raise ConfigError(
                f"{source_of(cfg, f'model.overrides.{key}')}: model.overrides.{key}: "
                f"{family.args_cls.__name__} has no field {key!r}"
                f"{f'; did you mean model.overrides.{hint}?' if hint else ''} "
                f"Valid fields: {', '.join(fields)}"
            )
    _typed_in_files(cfg, family.args_cls)
    overrides = dict(cfg.model.overrides)
    # model.attention picks the attention backend of every model family (MoE args inherit Llama's).
    if "attention" in overrides and overrides["attention"] != cfg.model.attention:
        raise ConfigError(
            f"{source_of(cfg, 'model.overrides.attention')}: model.overrides.attention = "
            f"{format_value(overrides['attention'])} conflicts with model.attention = "
            f"{format_value(cfg.model.attention)}; set the backend with model.attention only")
    if "attention" in fields:
        overrides["attention"] = cfg.model.attention
    try:
        return family.make_args(flavor, overrides)
    except (ValueError, TypeError) as e:
        raise ConfigError(f"{source_of(cfg, 'model.overrides')}: {e}") from e


def _batch_rule(cfg: JobConfig, dp: int) -> None:
    """global_batch_size must be a whole number of micro-batches over all DP ranks."""
    local, glob = cfg.training.local_batch_size, cfg.training.global_batch_size
    per_step = local * dp
    if glob == -1 or glob % per_step == 0:
        return
    multiples = ", ".join(str(per_step * k) for k in range(1, 4))
    msg = (
        f"{source_of(cfg, 'training.global_batch_size')}: training.global_batch_size = {glob} must be "
        f"a multiple of training.local_batch_size x dp = {local} x {dp} = {per_step} (the quotient is "
        f"the gradient accumulation count). Valid: -1 (no accumulation), {multiples}, ..."
    )
    if glob % dp == 0:
        per_rank = glob // dp
        divisors = [str(d) for d in range(1, per_rank + 1) if per_rank % d == 0]
        msg += f"; or keep {glob} with local_batch_size in {', '.join(divisors)}"
    else:
        msg += f"; it must at least be divisible by dp = {dp}"
    raise ConfigError(msg)


def _tokenizer_fits(cfg: JobConfig, args: Any) -> Any:
    """Every token id of data.tokenizer must have a row in the model's embedding. Returns the
    tokenizer."""
    from trainer.data.tokenizer import build_tokenizer  # lazily: numpy and tokenizers, no torch

    try:
        tokenizer = build_tokenizer(cfg.data.tokenizer)
    except ValueError as e:
        why = str(e) if str(e).startswith("data.tokenizer") else f"data.tokenizer: {e}"
        raise ConfigError(f"{source_of(cfg, 'data.tokenizer')}: {why}") from e
    vocab = tokenizer.vocab_size
    if vocab > args.vocab_size:
        # Blame the override when there is one: it, not the tokenizer, is then what changed.
        override = "model.overrides.vocab_size" in getattr(cfg, "_sources", {})
        where = source_of(cfg, "model.overrides.vocab_size" if override else "data.tokenizer")
        size = (f"vocab_size {args.vocab_size:,} (model.overrides.vocab_size)" if override else
                f"vocab_size {args.vocab_size:,}")
        raise ConfigError(
            f"{where}: data.tokenizer = {format_value(cfg.data.tokenizer)} has "
            f"{vocab:,} tokens but model {cfg.model.name} flavor {cfg.model.flavor} has {size}; "
            f"use a config whose model covers it (the Llama-3 flavors have "
            f"128,256), set model.overrides.vocab_size = {vocab} or more, or use a smaller tokenizer")
    return tokenizer


def _shards_fit(cfg: JobConfig, tokenizer: Any) -> None:
    """A folder of shards is read here as every rank would read it (headers only: no token is
    loaded): an unfinished prepare_data folder, shards of another tokenizer or a dataset shorter
    than one sample are one error here instead of one per rank after start-up."""
    if cfg.data.dataset == "embedded":  # built by rank 0 at start-up, from the tokenizer
        return
    if "LOCAL_RANK" in os.environ:
        # A rank under torchrun: its Trainer reads the same headers next; reading a corpus of
        # thousands of shard headers twice on every rank is what this would add.
        return
    from trainer.data.shards import TokenSource

    try:
        source = TokenSource(cfg.data.dataset, tokenizer.fingerprint)
    except ValueError as e:
        raise ConfigError(f"{source_of(cfg, 'data.dataset')}: data.dataset = "
                          f"{format_value(cfg.data.dataset)}: {e}") from e
    seq_len = cfg.training.seq_len
    if len(source) < seq_len + 1:
        raise ConfigError(
            f"{source_of(cfg, 'data.dataset')}: data.dataset = {format_value(cfg.data.dataset)} holds "
            f"{len(source):,} tokens, fewer than one sample of training.seq_len + 1 = {seq_len + 1:,}; use "
            "a shorter training.seq_len or a larger dataset")


def _model_limits(cfg: JobConfig, args: Any) -> None:
    """What the model or its attention backend cannot run, found here rather than at the first
    forward, after every rank has started."""
    _shards_fit(cfg, _tokenizer_fits(cfg, args))
    max_seq_len = getattr(args, "max_seq_len", None)
    if max_seq_len is not None and cfg.training.seq_len > max_seq_len:
        raise ConfigError(
            f"{source_of(cfg, 'training.seq_len')}: training.seq_len = {cfg.training.seq_len} exceeds "
            f"the model's max_seq_len = {max_seq_len} (model {cfg.model.name} flavor {cfg.model.flavor}); "
            f"lower it, or raise [model] overrides.max_seq_len")
    if cfg.model.attention == "thunderkittens" and cfg.data.document_mask:
        raise ConfigError(
            f"{source_of(cfg, 'data.document_mask')}: data.document_mask = true: the thunderkittens "
            "attention backend has no document masks; use model.attention = \"triton\" or \"sdpa\", "
            "or set data.document_mask = false")


def _dataset_exists(cfg: JobConfig) -> None:
    """data.dataset is "embedded" or a folder of token shards (trainer.data.build_dataset): a
    missing folder is found here, not after every rank has started. A raw corpus file or glob named
    here gets the prepare_data command that turns it into a folder (trainer/data/dataset_hint.py)."""
    from trainer.data.dataset_hint import dataset_problem

    spec = cfg.data.dataset
    if spec == "embedded" or Path(spec).expanduser().is_dir():
        return
    found, fix = dataset_problem(spec, cfg.data.tokenizer)
    raise ConfigError(f"{source_of(cfg, 'data.dataset')}: data.dataset = {format_value(spec)}: {found}; {fix}")


def _packages_installed(cfg: JobConfig) -> None:
    """Optional packages the config asks for, found missing before any rank starts (wandb is not
    here: its absence is a warning, the run goes on without it)."""
    import importlib.util

    if cfg.metrics.enable_tensorboard and importlib.util.find_spec("tensorboard") is None:
        raise ConfigError(
            f"{source_of(cfg, 'metrics.enable_tensorboard')}: metrics.enable_tensorboard = true needs "
            "the tensorboard package, which is not installed: run `pip install tensorboard` (in a "
            "checkout: `pip install -e '.[tensorboard]'`), or set metrics.enable_tensorboard = false")


_DEGREES = ("parallelism.data_parallel_replicate_degree", "parallelism.data_parallel_shard_degree",
            "parallelism.context_parallel_degree", "parallelism.tensor_parallel_degree",
            "parallelism.expert_parallel_degree")


# The keys of a profiling window that ends after the run (trainer/profiling.py).
_PROFILING_WINDOW = ("profiling.enable_profiling", "profiling.enable_memory_snapshot",
                     "profiling.profile_start_step", "profiling.profile_steps", "training.steps")


def _where(cfg: JobConfig, keys: tuple[str, ...]) -> str:
    """Where `keys` were set: 'a.toml', or 'a.toml (tensor_parallel_degree) and command line
    (data_parallel_shard_degree)' when they differ; 'default' when none was set."""
    by_source: dict[str, list[str]] = {}
    for key in keys:
        source = source_of(cfg, key)
        if source != "default":
            by_source.setdefault(source, []).append(key.split(".", 1)[1])
    if len(by_source) <= 1:
        return next(iter(by_source), "default")
    return " and ".join(f"{s} ({', '.join(k)})" for s, k in by_source.items())


def check_device_backends(cfg: JobConfig, device_type: str) -> None:
    """Backends that need a GPU, checked by each rank once it knows its device (validate_config
    runs anywhere, e.g. `python -m trainer.config` on a login node); without this a CPU run failed
    at its first forward with a tensor-dtype error that named no key."""
    if device_type == "cuda":
        return
    used = {"model.attention": (cfg.model.attention, '"sdpa"'),
            "float8.backend": (cfg.float8.backend if cfg.float8.enable else None,
                               '"torch" (emulated off CUDA)')}
    for key, (value, here) in used.items():
        if value == "thunderkittens":
            raise ConfigError(
                f"{source_of(cfg, key)}: {key} = \"thunderkittens\" needs an NVIDIA Hopper GPU "
                f"(sm_90a) and this run's device is {device_type}; use {here} here")
        # Triton kernels run off CUDA only in Triton's interpreter (slow; what the CPU tests use).
        if value == "triton" and os.environ.get("TRITON_INTERPRET") != "1":
            raise ConfigError(
                f"{source_of(cfg, key)}: {key} = \"triton\" needs a CUDA GPU and this run's device "
                f"is {device_type}; use {here} here (or export TRITON_INTERPRET=1 to run the Triton "
                f"kernels in Triton's interpreter, slowly)")


def validate_config(cfg: JobConfig, world_size: int) -> "ParallelDims":
    """All checks for a run on `world_size` ranks; returns the run's ParallelDims."""
    from trainer.parallel.dims import ParallelDims

    from trainer.profiling import check_profiling_config

    check_values(cfg)
    try:
        check_profiling_config(cfg)
    except ValueError as e:
        raise ConfigError(f"{_where(cfg, _PROFILING_WINDOW)}: {e}") from e
    _dataset_exists(cfg)
    _packages_installed(cfg)
    try:
        dims = ParallelDims.from_config(cfg.parallelism, world_size)
    except ValueError as e:
        # A message about one degree starts with its key; the others concern them all.
        keys = tuple(k for k in _DEGREES if str(e).startswith(k)) or _DEGREES
        raise ConfigError(f"{_where(cfg, keys)}: {e}") from e
    _batch_rule(cfg, dims.dp)
    args = resolve_model_args(cfg)
    n_heads = args.n_heads
    n_kv_heads = getattr(args, "n_kv_heads", None) or n_heads  # None means no GQA
    try:
        dims.validate_for_model(n_heads, n_kv_heads, cfg.training.seq_len)
    except ValueError as e:
        seq = str(e).startswith("training.seq_len")
        keys = ("training.seq_len",) + _DEGREES[2:4] if seq else _DEGREES[3:4]
        raise ConfigError(f"{_where(cfg, keys)}: {e} (model {cfg.model.name} flavor "
                          f"{cfg.model.flavor})") from e
    _model_limits(cfg, args)
    if dims.ep > 1:
        n_experts = getattr(args, "n_experts", None)
        if n_experts is None:
            raise ConfigError(
                f"{source_of(cfg, 'parallelism.expert_parallel_degree')}: "
                f"parallelism.expert_parallel_degree = {dims.ep} needs a model with experts "
                f"(model.name = 'moe'); {cfg.model.name} has none")
        if n_experts % dims.ep != 0:
            raise ConfigError(
                f"{source_of(cfg, 'parallelism.expert_parallel_degree')}: "
                f"parallelism.expert_parallel_degree = {dims.ep} must divide the model's "
                f"{n_experts} experts (model {cfg.model.name} flavor {cfg.model.flavor})")
    return dims
