"""What the schema allows: sections, keys, their types, and the shared checks on single values.

Everything here is derived from the dataclasses in schema.py, so adding a field there is enough to
make it loadable from TOML, settable from the command line and listed by --help.
"""

from __future__ import annotations

import dataclasses
import difflib
import typing
from functools import lru_cache
from typing import Any

from trainer.config import schema
from trainer.config.schema import JobConfig

COMMAND_LINE = "command line"
NO_VALUE: Any = object()  # "the value is not known here" (the command line names a key alone)


class ConfigError(ValueError):
    """A user error in a config file or the command line; the message names source, key and fix."""


@lru_cache(maxsize=None)
def sections() -> dict[str, type]:
    """Section name -> its dataclass, in the order of JobConfig's fields."""
    hints = typing.get_type_hints(JobConfig, vars(schema))
    return {f.name: hints[f.name] for f in dataclasses.fields(JobConfig)}


@lru_cache(maxsize=None)
def section_fields(section: str) -> dict[str, tuple[Any, Any]]:
    """Key -> (type, default) of one section, in declaration order."""
    cls = sections()[section]
    hints = typing.get_type_hints(cls, vars(schema))
    out: dict[str, tuple[Any, Any]] = {}
    for f in dataclasses.fields(cls):
        if f.default is not dataclasses.MISSING:
            default = f.default
        else:
            default = f.default_factory()  # type: ignore[misc]
        out[f.name] = (hints[f.name], default)
    return out


def all_keys() -> list[str]:
    return [f"{s}.{k}" for s in sections() for k in section_fields(s)]


def suggest(name: str, candidates: list[str]) -> str | None:
    """The closest candidate to `name` (difflib), or None when nothing is close."""
    hits = difflib.get_close_matches(name, candidates, n=1, cutoff=0.6)
    if not hits:
        # Case slips ("adamw" for "AdamW") score low in difflib; catch them separately.
        lowered = {c.lower(): c for c in candidates}
        if name.lower() in lowered:
            return lowered[name.lower()]
    return hits[0] if hits else None


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong in a file or on the command line. `valid` ("Valid keys in [x]: ...") is said
    once per error, after all of its problems."""

    text: str
    valid: str = ""


def problems_message(source: str, problems: list[Problem]) -> str:
    """One error for all problems of one source: a single line for one, a list for several."""
    if len(problems) == 1:
        p = problems[0]
        return f"{source}: {p.text}" + (f" {p.valid}" if p.valid else "")
    lines = "".join(f"\n  - {p.text}" for p in problems)
    valid = "".join(f"\n{v}" for v in dict.fromkeys(p.valid for p in problems if p.valid))
    return f"{source}: {len(problems)} problems:{lines}{valid}"


def _fuzzy_section(section: str) -> Problem:
    names = list(sections())
    hint = suggest(section, names)
    text = f"unknown section [{section}]" + (f"; did you mean [{hint}]?" if hint else ".")
    return Problem(text, f"Valid sections: {', '.join(names)}")


def _fuzzy_key(section: str, key: str) -> Problem:
    """section.key is not in the schema: the closest key of the same section first, then the same
    key in another section (training.lr -> optimizer.lr), then the closest overall."""
    keys = list(section_fields(section))
    if key == "include":  # TOML puts every line after [section] into that table
        return Problem(f"{section}.include: include = [...] belongs at the top of the file, before the "
                       f"first [section] table (here it is read as a key of [{section}])", "")
    hint = suggest(key, keys)
    full_hint = f"{section}.{hint}" if hint else None
    if full_hint is None:
        elsewhere = [f"{s}.{key}" for s in sections() if key in section_fields(s)]
        full_hint = elsewhere[0] if elsewhere else suggest(f"{section}.{key}", all_keys())
    text = f"unknown key {section}.{key}" + (f"; did you mean {full_hint}?" if full_hint else ".")
    return Problem(text, f"Valid keys in [{section}]: {', '.join(keys)}")


def unknown_section_problems(section: str, table: Any = NO_VALUE, source: str = "") -> list[Problem]:
    """[section] is not titankit's: torchtitan's table first (one problem per table entry hit),
    else the closest section name."""
    return _ported_problems(section, table, source) or [_fuzzy_section(section)]


def unknown_key_problems(
    section: str, key: str, value: Any = NO_VALUE, source: str = ""
) -> list[Problem]:
    """section.key is not titankit's: torchtitan's table first, else the closest key."""
    return _ported_problems(f"{section}.{key}", value, source) or [_fuzzy_key(section, key)]


def unknown_section_message(section: str, source: str) -> str:
    return problems_message(source, unknown_section_problems(section, source=source))


def unknown_key_message(section: str, key: str, source: str, value: Any = NO_VALUE) -> str:
    return problems_message(source, unknown_key_problems(section, key, value, source))


# ---------------------------------------------------------------- torchtitan's keys


@dataclasses.dataclass(frozen=True)
class Ported:
    """What titankit makes of a torchtitan section or key that it does not have."""

    kind: str  # renamed | inverted | unsupported | harmless
    target: str = ""  # renamed, inverted: titankit's key (or [section] for a renamed section)
    note: str = ""  # renamed: how values differ; unsupported: the feature; harmless: why
    instead: str = ""  # unsupported: what to do instead
    copy_value: bool = True  # renamed: torchtitan's value means the same in titankit


def _renamed(target: str, note: str = "", copy_value: bool = True) -> Ported:
    return Ported("renamed", target=target, note=note, copy_value=copy_value)


def _inverted(target: str) -> Ported:
    return Ported("inverted", target=target)


def _unsupported(feature: str, instead: str = "") -> Ported:
    return Ported("unsupported", note=feature, instead=instead)


def _harmless(why: str) -> Ported:
    return Ported("harmless", note=why)


_PIPELINE = _unsupported(
    "pipeline parallelism",
    "spread the model with parallelism.data_parallel_shard_degree (FSDP) and tensor_parallel_degree "
    "instead; a degree of 1, torchtitan's default, is the same as leaving the key out")
_MX = _unsupported("MX formats (mxfp8)", "FP8 training is [float8] enable = true")
_FROM_HF = ("convert Hugging Face weights once with scripts/convert_checkpoint.py from-hf, then set "
            "checkpoint.initial_load_path to the result")

# torchtitan v0.2.2's sections and keys (torchtitan/config/job_config.py at tag v0.2.2, commit
# 73a0e69) that titankit renamed, handles differently or does not have; every other torchtitan key
# is titankit's too (trainer/config/schema.py). The loader looks a key up here before it guesses
# the closest titankit key, so a torchtitan key never gets a misleading "did you mean". A key with
# no entry of its own takes its longest listed prefix ("validation" covers validation.freq).
TORCHTITAN_KEYS: dict[str, Ported] = {
    "job": _renamed("[run]", "job.dump_folder is run.dump_folder; description, print_config and "
                   "save_config_file can be removed"),
    "job.config_file": _unsupported("naming the config file inside a config",
                                    "pass the file as --config FILE.toml; in a TOML, "
                                    'include = ["base.toml"] merges other files'),
    "job.dump_folder": _renamed("run.dump_folder", "a run writes into {dump_folder}/{run.name}/"),
    "job.description": _harmless("run.name names the run and its folder"),
    "job.print_config": _harmless("python -m trainer.config --config FILE prints the resolved "
                                  "config, and every run writes it to config.toml in its run folder"),
    "job.save_config_file": _harmless("every run writes its resolved config to config.toml in its "
                                      "run folder"),
    "job.custom_config_module": _unsupported("extending the config from another module",
                                             "add fields to trainer/config/schema.py"),
    "profiling.profile_freq": _unsupported(
        "periodic profiling", "titankit traces one window of steps, from profiling.profile_start_step "
        "for profiling.profile_steps steps"),
    "profiling.profiler_active": _renamed("profiling.profile_steps", "the steps of the one traced "
                                          "window, which starts at profiling.profile_start_step"),
    "profiling.profiler_warmup": _harmless("the profiler warms up during the one step before "
                                           "profiling.profile_start_step"),
    "profiling.save_memory_snapshot_folder": _harmless(
        "memory snapshots go into the traces' step-N folder under profiling.save_traces_folder"),
    "metrics.disable_color_printing": _harmless("titankit's console log has no colors"),
    "metrics.save_tb_folder": _unsupported("choosing the TensorBoard folder",
                                           "events always go to tb/ in the run folder"),
    "metrics.save_for_all_ranks": _unsupported("metrics from every rank",
                                               "titankit logs metrics on rank 0 only"),
    "model.hf_assets_path": _renamed(
        "data.tokenizer", "data.tokenizer takes the tokenizer.json file itself, e.g. "
        '"<hf_assets_path>/tokenizer.json"; for the weights, ' + _FROM_HF, copy_value=False),
    "model.tokenizer_path": _renamed("data.tokenizer", 'data.tokenizer takes the path of a '
                                     'tokenizer.json file, or "bytes"', copy_value=False),
    "model.converters": _unsupported("model converters",
                                     'converters = ["float8"] is [float8] enable = true; '
                                     "MX formats (mxfp8) are not supported"),
    "model.print_after_conversion": _harmless("titankit does not print the model"),
    "optimizer.implementation": _harmless("titankit picks fused AdamW on CUDA and foreach on CPU"),
    "optimizer.early_step_in_backward": _unsupported("optimizer steps inside the backward"),
    "lr_scheduler.total_steps": _unsupported(
        "a schedule longer than the run", "the schedule spans training.steps; lr_scheduler."
        "decay_ratio shortens the decay"),
    "training.dataset": _renamed(
        "data.dataset", 'data.dataset is "embedded", which needs no download, or a folder of token '
        "shards made by scripts/prepare_data.py; torchtitan's c4 and c4_test are not built in",
        copy_value=False),
    "training.dataset_path": _renamed(
        "data.dataset", "data.dataset takes a folder of token shards: make one from the raw data "
        "with scripts/prepare_data.py --input ... --output FOLDER", copy_value=False),
    "training.enable_cpu_offload": _unsupported(
        "CPU offloading", "shard parameters and optimizer state over more ranks with "
        "parallelism.data_parallel_shard_degree"),
    "training.dtype": _unsupported(
        "pure bf16 training", "parameters and optimizer state stay in fp32; FSDP computes in "
        "training.mixed_precision_param (bfloat16 by default)"),
    "training.gc_debug": _unsupported("the GC debug mode", "training.gc_freq sets when titankit "
                                      "collects"),
    "training.dataloader": _harmless("titankit reads memory-mapped token shards in the training "
                                     "process, with no DataLoader workers"),
    "parallelism.disable_loss_parallel": _inverted("parallelism.enable_loss_parallel"),
    "parallelism.pipeline_parallel_degree": _PIPELINE,
    "parallelism.module_fqns_per_model_part": _PIPELINE,
    "parallelism.pipeline_parallel_first_stage_less_layers": _PIPELINE,
    "parallelism.pipeline_parallel_last_stage_less_layers": _PIPELINE,
    "parallelism.pipeline_parallel_layers_per_stage": _PIPELINE,
    "parallelism.pipeline_parallel_schedule": _PIPELINE,
    "parallelism.pipeline_parallel_schedule_csv": _PIPELINE,
    "parallelism.pipeline_parallel_microbatch_size": _PIPELINE,
    "parallelism.pipeline_parallel_expert_parallel_overlap": _PIPELINE,
    "parallelism.context_parallel_load_balancer": _unsupported(
        "other context-parallel load balancers", "titankit always balances with head-tail chunks "
        '(torchtitan\'s "headtail")'),
    "parallelism.context_parallel_rotate_method": _renamed(
        "parallelism.context_parallel_method", '"allgather" is the same; torchtitan\'s "alltoall" '
        '(K/V passed from rank to rank) is titankit\'s "ring"', copy_value=False),
    "parallelism.expert_tensor_parallel_degree": _unsupported(
        "tensor-parallel experts", "each expert lives whole on one rank (torchtitan's etp = 1); "
        "parallelism.expert_parallel_degree takes its ranks from dp_shard x cp x tp"),
    "parallelism.expert_parallel_comm_backend": _unsupported(
        "DeepEP", "titankit moves tokens with all-to-all collectives (torchtitan's \"standard\")"),
    "checkpoint.enable_ft_dataloader_checkpoints": _harmless(
        "titankit has no torchft fault tolerance, and its checkpoints always hold the data position"),
    "checkpoint.initial_load_in_hf": _unsupported("loading Hugging Face checkpoints", _FROM_HF),
    "checkpoint.initial_load_in_hf_quantized": _unsupported("loading quantized Hugging Face "
                                                            "checkpoints", _FROM_HF),
    "checkpoint.last_save_model_only": _unsupported(
        "a weights-only last save", "the last save is a full checkpoint like every other; export "
        "weights with scripts/convert_checkpoint.py to-hf"),
    "checkpoint.last_save_in_hf": _unsupported(
        "saving in Hugging Face format", "convert a saved step with scripts/convert_checkpoint.py to-hf"),
    "checkpoint.export_dtype": _unsupported(
        "an export dtype", "scripts/convert_checkpoint.py to-hf --dtype float32 sets the dtype "
        "of exported weights, bfloat16 by default"),
    "checkpoint.exclude_from_loading": _unsupported(
        "excluding parts of a checkpoint", "checkpoint.initial_load_model_only = true loads the "
        "model weights only"),
    "checkpoint.enable_first_step_checkpoint": _unsupported(
        "a save after the first step", "to try saving on a new cluster, run a few steps with "
        "checkpoint.interval = 1"),
    "checkpoint.create_seed_checkpoint": _harmless(
        "titankit's initial weights depend on run.seed only, not on the parallel layout, so no "
        "seed checkpoint is needed"),
    "checkpoint.load_only": _unsupported("loading without saving"),
    "activation_checkpoint.per_op_sac_force_recompute_mm_shapes_by_fqns": _unsupported(
        "per-module overrides of the per-op rule"),
    "activation_checkpoint.early_stop": _unsupported("stopping recomputation early"),
    "activation_checkpoint.visualize_memory_budget_pareto": _unsupported(
        "the memory budget Pareto plot"),
    "activation_checkpoint.preserve_rng_state": _harmless(
        "titankit never stashes RNG state for recomputation: its blocks have no dropout"),
    "activation_checkpoint.determinism_check": _unsupported(
        "choosing the recomputation check", "titankit uses torch.utils.checkpoint's default"),
    "activation_checkpoint.debug": _unsupported("activation checkpointing debug logs"),
    "compile.components": _unsupported(
        "choosing what to compile", "compile.enable compiles every transformer block, and the loss "
        "unless tensor parallelism shards the logits"),
    "compile.backend": _unsupported("other torch.compile backends", "titankit uses inductor"),
    "quantize": _renamed("[float8]", "[quantize.linear.float8] filter_fqns and recipe_name go "
                         "there (recipe_name is recipe), with enable = true"),
    "quantize.linear.float8.enable_fsdp_float8_all_gather": _unsupported(
        "FP8 all-gathers", "FSDP all-gathers the weights of FP8 layers in bf16"),
    "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp": _unsupported(
        "FP8 all-gathers", "FSDP all-gathers the weights of FP8 layers in bf16"),
    "quantize.linear.float8.recipe_name": _renamed(
        "float8.recipe", '"tensorwise" and "rowwise" are the same; "rowwise_with_gw_hp" is '
        'float8.recipe = "rowwise" with float8.grad_weight_high_precision = true; float8.enable = '
        "true turns FP8 on", copy_value=False),
    "quantize.linear.float8.filter_fqns": _renamed("float8.filter_fqns", "float8.enable = true "
                                                   "turns FP8 on"),
    "quantize.linear.float8.emulate": _harmless(
        'with float8.backend = "torch" titankit emulates FP8 GEMMs by itself where the device '
        "has none"),
    "quantize.linear.mx": _MX,
    "quantize.grouped_mm.float8.fqns": _unsupported(
        "choosing FP8 MoE layers by name", "float8.enable = true converts every MoE's grouped "
        "experts too; float8.filter_fqns excludes modules by name"),
    "quantize.grouped_mm.mx": _MX,
    "comm.save_traces_folder": _unsupported(
        "choosing the flight-recorder folder", "dumps go to comm_trace/ in the run folder"),
    "comm.save_traces_file_prefix": _unsupported(
        "choosing the flight-recorder file names", "dumps are comm_trace/rank_<r> in the run folder"),
    "comm.mode": _unsupported(
        "fake or local-tensor communication", "to check a config without GPUs (torchtitan's "
        "fake_backend dry run), run python -m trainer.config --config FILE --world-size N"),
    "memory_estimation": _unsupported("FSDP memory estimation"),
    "fault_tolerance": _unsupported("torchft fault tolerance",
                                    "a restarted run resumes from its newest complete checkpoint"),
    "experimental": _unsupported("importing custom modules", "model families live in "
                                 "trainer/models/, the config schema in trainer/config/schema.py"),
    "validation": _unsupported("a validation loop"),
    "debug": _renamed("[run]", "debug.seed is run.seed and debug.deterministic is run.deterministic"),
    "debug.seed": _renamed("run.seed"),
    "debug.deterministic": _renamed("run.deterministic"),
    "debug.deterministic_warn_only": _unsupported(
        "warn-only determinism", "run.deterministic = true raises on an op that has no "
        "deterministic implementation"),
    "debug.moe_force_load_balance": _unsupported("forced MoE load balance"),
}


def torchtitan_entry(path: str) -> tuple[str, Ported] | None:
    """The entry for a dotted path: its own, or its longest listed prefix's."""
    parts = path.split(".")
    for n in range(len(parts), 0, -1):
        prefix = ".".join(parts[:n])
        if prefix in TORCHTITAN_KEYS:
            return prefix, TORCHTITAN_KEYS[prefix]
    return None


def _leaves(path: str, value: Any) -> list[tuple[str, Any]]:
    """(dotted path, value) of every scalar under `value` (a nested TOML table), or (path, value)."""
    if isinstance(value, dict) and value:
        return [leaf for k, v in value.items() for leaf in _leaves(f"{path}.{k}", v)]
    return [(path, value)]


def _cli_value(value: Any) -> str:
    if isinstance(value, bool):
        return str(value).lower()
    if isinstance(value, list):
        return ",".join(_cli_value(v) for v in value)
    return str(value)


def _write(key: str, value: Any, source: str) -> str:
    """How to set titankit's `key` to `value` where the user wrote the torchtitan key."""
    if source == COMMAND_LINE:
        return f"--{key}={_cli_value(value)}"
    section, _, name = key.partition(".")
    return f"{name} = {format_value(value)} under [{section}]"


def _ported_text(path: str, entry: Ported, leaves: list[tuple[str, Any]], source: str) -> str:
    """'<what the user wrote>: <what titankit makes of it>' for the leaves under one entry."""
    what = "section" if "." not in path else "key"
    value = leaves[0][1] if len(leaves) == 1 and leaves[0][0] == path else NO_VALUE
    if value is not NO_VALUE and not isinstance(value, dict):
        subject = f"{path} = {format_value(value)}"
    else:
        subject = f"[{path}]" if what == "section" else path
        inner = [p[len(path) + 1:] for p, _ in leaves if p != path]
        if inner:
            subject += f" ({', '.join(inner)})"
    if entry.kind == "renamed" and entry.target.startswith("["):
        keys = ", ".join(section_fields(entry.target[1:-1]))
        text = f"torchtitan's section [{path}] is titankit's {entry.target} (keys: {keys})"
    elif entry.kind == "renamed":
        text = f"torchtitan's name for titankit's {entry.target}"
        if entry.copy_value and value is not NO_VALUE and not isinstance(value, dict):
            text += f": write {_write(entry.target, value, source)}"
        elif not entry.note:
            text += f"; set {entry.target} instead"
    elif entry.kind == "inverted":
        text = f"torchtitan's inverse of titankit's {entry.target}"
        if isinstance(value, bool):
            text += f": write {_write(entry.target, not value, source)}"
        else:
            text += (f": write {_write(entry.target, False, source)} for torchtitan's {path} = "
                     "true, and the reverse")
    elif entry.kind == "unsupported":
        text = f"a torchtitan {what} for {entry.note}, which titankit does not support: remove it"
        return f"{subject}: {text}" + (f"; {entry.instead}" if entry.instead else "")
    elif entry.kind == "harmless":
        return (f"{subject}: a torchtitan {what} that means nothing in titankit ({entry.note}); "
                "remove it, nothing changes")
    else:
        raise AssertionError(f"TORCHTITAN_KEYS[{path!r}]: unknown kind {entry.kind!r}")
    return f"{subject}: {text}" + (f"; {entry.note}" if entry.note else "")


def _ported_problems(path: str, value: Any, source: str) -> list[Problem]:
    """One problem per table entry that the keys under `path` hit; [] when any of them misses
    (then the caller's fuzzy match speaks for the whole path)."""
    groups: dict[str, list[tuple[str, Any]]] = {}
    entries: dict[str, Ported] = {}
    for leaf in _leaves(path, value):
        hit = torchtitan_entry(leaf[0])
        if hit is None:
            return []
        entries[hit[0]] = hit[1]
        groups.setdefault(hit[0], []).append(leaf)
    return [Problem(_ported_text(p, entries[p], leaves, source)) for p, leaves in groups.items()]


def type_name(tp: Any) -> str:
    """Short readable type name for messages and --help."""
    if tp is bool:
        return "bool"
    if tp in (int, float, str):
        return tp.__name__
    origin = typing.get_origin(tp)
    if origin is list:
        (arg,) = typing.get_args(tp)
        return f"list[{type_name(arg)}]"
    if origin is dict:
        return "table"
    return str(tp)


def expected_phrase(tp: Any) -> str:
    """What a valid value of `tp` looks like, for error messages."""
    if tp is bool:
        return "a boolean (true or false)"
    if tp is int:
        return "an integer"
    if tp is float:
        return "a number"
    if tp is str:
        return "a string"
    if typing.get_origin(tp) is list:
        return f"a list of {expected_phrase(typing.get_args(tp)[0])[2:]}s"
    if typing.get_origin(tp) is dict:
        return "a table of scalars (ints, floats, bools, strings or lists of them)"
    return type_name(tp)


def format_value(value: Any) -> str:
    """A value as TOML would spell it (used in messages, so they read like the file)."""
    from trainer.config.toml_writer import toml_value

    try:
        return toml_value(value)
    except (TypeError, ValueError):
        return repr(value)


def _is_scalar(value: Any) -> bool:
    return isinstance(value, (bool, int, float, str))


def coerce(value: Any, tp: Any, key: str, source: str) -> Any:
    """Check `value` against the schema type `tp` and return it normalised (int -> float for float
    fields, lists copied). bool is not accepted as an int (TOML true is not 1)."""
    ok = False
    if tp is bool:
        ok = isinstance(value, bool)
    elif tp is int:
        ok = isinstance(value, int) and not isinstance(value, bool)
    elif tp is float:
        ok = isinstance(value, (int, float)) and not isinstance(value, bool)
        if ok:
            value = float(value)
    elif tp is str:
        ok = isinstance(value, str)
    elif typing.get_origin(tp) is list:
        (item_tp,) = typing.get_args(tp)
        if isinstance(value, list):
            return [coerce(v, item_tp, f"{key}[{i}]", source) for i, v in enumerate(value)]
    elif typing.get_origin(tp) is dict:
        if isinstance(value, dict):
            for k, v in value.items():
                items = v if isinstance(v, list) else [v]
                if not all(_is_scalar(x) for x in items):
                    raise ConfigError(
                        f"{source}: {key}.{k} = {format_value(v)}: expected {expected_phrase(tp)[2:]}"
                        " only; nested tables are not supported here"
                    )
            return dict(value)
    else:
        raise TypeError(f"schema type {tp!r} of {key} is not supported by the config loader")
    if not ok:
        raise ConfigError(
            f"{source}: {key} = {format_value(value)}: expected {expected_phrase(tp)}"
        )
    return value


_TRUE = ("true", "1", "yes", "on")
_FALSE = ("false", "0", "no", "off")


def parse_bool_text(text: str) -> bool | None:
    low = text.strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    return None


def parse_text(text: str, tp: Any, key: str, source: str = COMMAND_LINE) -> Any:
    """Parse a command-line string into schema type `tp` (lists are comma separated)."""
    if tp is str:
        return text
    if tp is bool:
        b = parse_bool_text(text)
        if b is None:
            raise ConfigError(
                f"{source}: {key} = {text!r}: expected a boolean: true or false "
                f"(or {'/'.join(_TRUE[1:])} / {'/'.join(_FALSE[1:])})"
            )
        return b
    if tp in (int, float):
        try:
            return tp(text)
        except ValueError:
            raise ConfigError(f"{source}: {key} = {text!r}: expected {expected_phrase(tp)}") from None
    if typing.get_origin(tp) is list:
        (item_tp,) = typing.get_args(tp)
        if text.strip() == "":
            return []
        items = [t.strip() for t in text.split(",")]
        if any(t == "" for t in items):
            raise ConfigError(
                f"{source}: {key} = {text!r}: empty item in a comma-separated list "
                "(write a,b,c; an empty string means an empty list)"
            )
        return [parse_text(t, item_tp, key, source) for t in items]
    raise ConfigError(f"{source}: {key} cannot be set from the command line (type {type_name(tp)})")


def parse_scalar_text(text: str) -> Any:
    """Parse a free-form value (model.overrides.KEY=VALUE): int, then float, then bool, else str."""
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    low = text.strip().lower()
    if low in ("true", "false"):
        return low == "true"
    return text
