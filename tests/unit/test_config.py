"""The config system: defaults, TOML + include, command line, precedence, round trip, errors."""

from __future__ import annotations

import dataclasses
import os
import random
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from trainer.config import (
    ConfigError,
    JobConfig,
    config_to_dict,
    config_to_toml,
    load_config,
    source_of,
    validate_config,
)
from trainer.config.checks import CHOICES
from trainer.config.fields import section_fields, sections
from trainer.config.help import key_docs
from trainer.data.prepare import prepare

try:
    import tomllib
except ImportError:  # Python 3.10
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[2]

# Short runs with the default warm-up warn on purpose; that warning has its own test below.
pytestmark = pytest.mark.filterwarnings("ignore:lr_scheduler.warmup_steps")


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def load_file(path: Path, *overrides: str) -> JobConfig:
    return load_config(["--config", str(path), *overrides])


# ---------------------------------------------------------------- defaults, schema, help


def test_defaults_load_without_a_file():
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the defaults must not warn about themselves
        cfg = load_config([])
    assert cfg == JobConfig()
    assert source_of(cfg, "training.steps") == "default"


def test_every_schema_field_has_a_docstring():
    missing = [k for k, doc in key_docs().items() if not doc.strip()]
    assert missing == [], f"fields without a docstring (it is their --help): {missing}"


def test_help_lists_every_key_with_type_default_and_doc(capsys):
    with pytest.raises(SystemExit) as exc:
        load_config(["--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    for key, doc in key_docs().items():
        assert f"--{key}  (" in out
        assert doc.split()[0] in out
    assert "--training.steps  (int, default 50)" in out
    assert "Optimizer steps to train." in out
    assert "one of none | full | selective" in out


# ---------------------------------------------------------------- TOML files and include


def test_toml_file_sets_values_and_records_sources(tmp_path):
    f = write(tmp_path / "run.toml", """
[training]
steps = 7
max_norm = 2          # an int is fine where a float is due
[float8]
filter_fqns = ["output", "w2"]
[model.overrides]
n_layers = 3
""")
    cfg = load_file(f)
    assert cfg.training.steps == 7
    assert cfg.training.max_norm == 2.0 and isinstance(cfg.training.max_norm, float)
    assert cfg.float8.filter_fqns == ["output", "w2"]
    assert cfg.model.overrides == {"n_layers": 3}
    assert cfg.training.seq_len == JobConfig().training.seq_len  # untouched keys keep defaults
    assert source_of(cfg, "training.steps") == str(f)


def test_include_order_relative_paths_and_nesting(tmp_path):
    # main.toml -> [inc/one.toml -> ../base.toml, inc/two.toml]; later wins, the file itself last.
    write(tmp_path / "base.toml", """
[training]
steps = 1
seq_len = 64
local_batch_size = 3
[model.overrides]
n_layers = 2
dim = 64
""")
    write(tmp_path / "inc" / "one.toml", """
include = ["../base.toml"]
[training]
steps = 2
seq_len = 128
""")
    write(tmp_path / "inc" / "two.toml", """
[training]
steps = 3
[model.overrides]
n_layers = 5
""")
    main = write(tmp_path / "main.toml", """
include = ["inc/one.toml", "inc/two.toml"]
[training]
seq_len = 32
""")
    cfg = load_file(main)
    assert cfg.training.steps == 3  # two.toml is included after one.toml
    assert cfg.training.seq_len == 32  # the including file beats its includes
    assert cfg.training.local_batch_size == 3  # from base.toml, two levels down
    assert cfg.model.overrides == {"n_layers": 5, "dim": 64}  # tables merge key by key
    assert source_of(cfg, "training.steps") == str(tmp_path / "inc" / "two.toml")
    assert source_of(cfg, "model.overrides.dim").endswith("base.toml")


def test_include_cycle_is_detected(tmp_path):
    write(tmp_path / "a.toml", 'include = ["b.toml"]\n')
    write(tmp_path / "b.toml", 'include = ["a.toml"]\n')
    with pytest.raises(ConfigError, match="include cycle") as exc:
        load_file(tmp_path / "a.toml")
    assert "a.toml" in str(exc.value) and "b.toml" in str(exc.value)


def test_missing_include_names_including_file_and_path(tmp_path):
    main = write(tmp_path / "main.toml", 'include = ["nope/base.toml"]\n')
    with pytest.raises(ConfigError) as exc:
        load_file(main)
    msg = str(exc.value)
    assert str(main) in msg and "nope/base.toml" in msg and "not found" in msg

    (tmp_path / "nope").mkdir()  # the folder exists, the file in it is what was meant
    main = write(tmp_path / "main.toml", 'include = ["nope"]\n')
    with pytest.raises(ConfigError, match=rf"{main}: include 'nope' is a directory .*; name a TOML file in it"):
        load_file(main)

def test_missing_config_file(tmp_path):
    with pytest.raises(ConfigError, match="command line: config file .*absent.toml.* not found"):
        load_config(["--config", str(tmp_path / "absent.toml")])
    (tmp_path / "job.toml").write_text("")
    with pytest.raises(ConfigError, match=r"config file .* is a directory; pass a TOML file \(it holds job.toml\)"):
        load_config(["--config", str(tmp_path)])


def test_malformed_toml_names_file_and_parse_error(tmp_path):
    bad = write(tmp_path / "bad.toml", "[training]\nsteps = = 3\n")
    with pytest.raises(ConfigError) as exc:
        load_file(bad)
    msg = str(exc.value)
    assert str(bad) in msg and "malformed TOML" in msg and "line 2" in msg


def test_bad_include_value(tmp_path):
    f = write(tmp_path / "x.toml", "include = 3\n")
    with pytest.raises(ConfigError, match="include = 3: expected a list of file paths"):
        load_file(f)


# ---------------------------------------------------------------- command line


@pytest.mark.parametrize("argv, key, expected", [
    (["--training.steps=3"], "training.steps", 3),
    (["--training.steps", "3"], "training.steps", 3),
    (["--checkpoint.load_step", "-1"], "checkpoint.load_step", -1),
    (["--optimizer.lr=1"], "optimizer.lr", 1.0),
    (["--optimizer.lr", "3e-4"], "optimizer.lr", 3e-4),
    (["--metrics.enable_wandb"], "metrics.enable_wandb", True),
    (["--metrics.enable_wandb=false"], "metrics.enable_wandb", False),
    (["--metrics.enable_wandb", "false"], "metrics.enable_wandb", False),
    (["--metrics.enable_wandb", "--training.steps=3"], "metrics.enable_wandb", True),
    (["--float8.filter_fqns=output,w2"], "float8.filter_fqns", ["output", "w2"]),
    (["--float8.filter_fqns="], "float8.filter_fqns", []),
    (["--run.name", "my run"], "run.name", "my run"),
    (["--training.steps=3", "--training.steps=4"], "training.steps", 4),  # last one wins
])
def test_cli_forms(tmp_path, argv, key, expected):
    # The file sets the opposite boolean so a `=false` override is visible.
    f = write(tmp_path / "c.toml", "[metrics]\nenable_wandb = true\n")
    cfg = load_file(f, *argv)
    section, name = key.split(".")
    value = getattr(getattr(cfg, section), name)
    assert value == expected and type(value) is type(expected)
    assert source_of(cfg, key) == "command line"


def test_cli_model_overrides_parse_scalars():
    cfg = load_config(["--model.overrides.n_layers", "4", "--model.overrides.norm_eps=1e-6",
                       "--model.overrides.flag", "--model.overrides.act=silu",
                       "--model.overrides.tied=false"])
    assert cfg.model.overrides == {"n_layers": 4, "norm_eps": 1e-6, "flag": True, "act": "silu",
                                   "tied": False}
    assert type(cfg.model.overrides["n_layers"]) is int


def test_precedence_cli_over_toml_over_defaults(tmp_path):
    f = write(tmp_path / "p.toml", """
[training]
steps = 7
seq_len = 96
[model.overrides]
n_layers = 2
dim = 64
""")
    cfg = load_file(f, "--training.steps=3", "--model.overrides.n_layers=4")
    assert cfg.training.steps == 3  # CLI beats TOML
    assert cfg.training.seq_len == 96  # TOML beats default
    assert cfg.training.local_batch_size == JobConfig().training.local_batch_size  # default
    assert cfg.model.overrides == {"n_layers": 4, "dim": 64}


@pytest.mark.parametrize("argv, needles", [
    (["--training.stepz=3"], ["command line", "training.stepz", "did you mean training.steps"]),
    (["--trainng.steps=3"], ["command line", "[trainng]", "did you mean [training]"]),
    (["--training.lr=1e-3"], ["training.lr", "did you mean optimizer.lr"]),
    (["--training.steps=ten"], ["command line", "training.steps", "expected an integer"]),
    (["--training.steps"], ["--training.steps needs a value"]),
    (["--metrics.enable_wandb=maybe"], ["metrics.enable_wandb", "expected a boolean"]),
    (["--float8.filter_fqns=a,,b"], ["float8.filter_fqns", "empty item"]),
    (["--training.steps.x=1"], ["training.steps has no sub-keys"]),
    (["--model.overrides=3"], ["--model.overrides.n_layers=4"]),
    (["steps=3"], ["unexpected argument 'steps=3'"]),
    (["--config"], ["--config needs a file path"]),
    # Was: "config file '.' is a directory" (an unset variable in --config=$CFG, say)
    (["--config="], ["command line: --config is empty; pass a TOML file"]),
    (["--config", ""], ["command line: --config is empty; pass a TOML file"]),
])
def test_cli_errors(argv, needles):
    with pytest.raises(ConfigError) as exc:
        load_config(argv)
    for needle in needles:
        assert needle in str(exc.value)


# ---------------------------------------------------------------- TOML errors


@pytest.mark.parametrize("text, needles", [
    ("[training]\nstepz = 3\n", ["training.stepz", "did you mean training.steps"]),
    ("[trainig]\nsteps = 3\n", ["[trainig]", "did you mean [training]"]),
    ("[training]\nlr = 0.1\n", ["training.lr", "did you mean optimizer.lr"]),
    ("steps = 3\n", ["top-level key steps", "did you mean training.steps"]),
    ("training = 3\n", ["training = 3: expected a table"]),
    ('[training]\nsteps = "ten"\n', ['training.steps = "ten"', "expected an integer"]),
    ("[training]\nsteps = true\n", ["training.steps = true", "expected an integer"]),
    ("[training]\nsteps = 3.0\n", ["training.steps = 3.0", "expected an integer"]),
    ("[training]\nmax_norm = true\n", ["training.max_norm = true", "expected a number"]),
    ('[metrics]\nenable_wandb = "yes"\n', ["metrics.enable_wandb", "expected a boolean"]),
    ('[run]\nname = 5\n', ["run.name = 5", "expected a string"]),
    ('[float8]\nfilter_fqns = "output"\n', ["float8.filter_fqns", "expected a list of strings"]),
    ('[float8]\nfilter_fqns = ["output", 3]\n', ["float8.filter_fqns[1] = 3"]),
    ("[model.overrides.inner]\nx = 1\n", ["model.overrides.inner", "nested tables"]),
])
def test_toml_errors_name_file_key_and_fix(tmp_path, text, needles):
    f = write(tmp_path / "e.toml", text)
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    msg = str(exc.value)
    assert msg.startswith(str(f) + ":")
    for needle in needles:
        assert needle in msg


def test_error_names_the_included_file_that_holds_the_bad_line(tmp_path):
    write(tmp_path / "base.toml", '[training]\nseq_len = "long"\n')
    main = write(tmp_path / "main.toml", 'include = ["base.toml"]\n[training]\nsteps = 3\n')
    with pytest.raises(ConfigError) as exc:
        load_file(main)
    assert str(exc.value).startswith(str(tmp_path / "base.toml") + ": training.seq_len")


# ---------------------------------------------------------------- choices and ranges


@pytest.mark.parametrize("key", sorted(CHOICES))
def test_choice_fields_reject_other_values(tmp_path, key):
    section, name = key.split(".")
    f = write(tmp_path / "c.toml", f'[{section}]\n{name} = "bogus"\n')
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    msg = str(exc.value)
    assert msg.startswith(str(f)) and f'{key} = "bogus"' in msg
    assert " | ".join(CHOICES[key]) in msg
    for value in CHOICES[key]:  # every listed value is accepted (with what it needs)
        needs = ["--compile.enable"] if value == "memory_budget" else []
        cfg = load_config([f"--{key}={value}", *needs])
        assert getattr(getattr(cfg, section), name) == value


def test_choice_suggests_the_right_spelling():
    with pytest.raises(ConfigError, match="did you mean 'AdamW'"):
        load_config(["--optimizer.name=adamw"])
    with pytest.raises(ConfigError, match="did you mean 'selective'"):
        load_config(["--activation_checkpoint.mode=selectve"])


@pytest.mark.parametrize("arg, key", [
    ("--training.steps=0", "training.steps"),
    ("--training.seq_len=0", "training.seq_len"),
    ("--training.local_batch_size=0", "training.local_batch_size"),
    ("--training.global_batch_size=0", "training.global_batch_size"),
    ("--optimizer.lr=0", "optimizer.lr"),
    ("--optimizer.lr=-1e-3", "optimizer.lr"),
    ("--optimizer.lr=nan", "optimizer.lr"),
    ("--optimizer.lr=inf", "optimizer.lr"),
    ("--training.max_norm=inf", "training.max_norm"),
    ("--optimizer.beta2=1", "optimizer.beta2"),
    ("--lr_scheduler.warmup_steps=-1", "lr_scheduler.warmup_steps"),
    ("--lr_scheduler.min_lr_factor=1.5", "lr_scheduler.min_lr_factor"),
    ("--lr_scheduler.min_lr_factor=-0.1", "lr_scheduler.min_lr_factor"),
    ("--lr_scheduler.decay_ratio=0", "lr_scheduler.decay_ratio"),
    ("--lr_scheduler.decay_ratio=1.01", "lr_scheduler.decay_ratio"),
    ("--checkpoint.keep_latest_k=1", "checkpoint.keep_latest_k"),
    ("--checkpoint.interval=0", "checkpoint.interval"),
    ("--metrics.log_freq=0", "metrics.log_freq"),
    ("--metrics.gpu_sample_interval=-0.5", "metrics.gpu_sample_interval"),
    ("--run.name=a/b", "run.name"),
    ("--run.name=" + "x" * 256, "run.name"),
    ("--activation_checkpoint.selective_ac_option=every", "activation_checkpoint.selective_ac_option"),
    # a checkpoint folder outside the run folder would be shared by runs, outside the run's lock
    ("--checkpoint.folder=/tmp/shared_ckpt", "checkpoint.folder"),
    ("--checkpoint.folder=../other_run/checkpoint", "checkpoint.folder"),
    ("--checkpoint.folder=a/../../b", "checkpoint.folder"),
    ("--profiling.save_traces_folder=/tmp/traces", "profiling.save_traces_folder"),
    ("--profiling.profile_steps=0", "profiling.profile_steps"),
    ("--profiling.profile_start_step=0", "profiling.profile_start_step"),
    # timedelta overflows past 999,999,999 days: a traceback per rank at start-up before
    ("--comm.init_timeout_seconds=99999999999999", "comm.init_timeout_seconds"),
    ("--comm.train_timeout_seconds=99999999999999", "comm.train_timeout_seconds"),
])
def test_range_checks(arg, key):
    with pytest.raises(ConfigError) as exc:
        load_config([arg])
    msg = str(exc.value)
    assert msg.startswith("command line: " + key) and "must be" in msg


def test_checkpoint_and_trace_folders_may_be_nested_inside_the_run_folder():
    cfg = load_config(["--checkpoint.folder=ckpt/main", "--profiling.save_traces_folder=./traces"])
    assert (cfg.checkpoint.folder, cfg.profiling.save_traces_folder) == ("ckpt/main", "./traces")


@pytest.mark.parametrize("arg", [
    "--checkpoint.keep_latest_k=0", "--checkpoint.keep_latest_k=2",
    "--lr_scheduler.min_lr_factor=0", "--lr_scheduler.min_lr_factor=1",
    "--lr_scheduler.decay_ratio=1", "--training.global_batch_size=16",
    "--activation_checkpoint.selective_ac_option=2", "--training.max_norm=0",
])
def test_range_edges_are_accepted(arg):
    load_config([arg])


def test_warmup_longer_than_run_warns():
    with pytest.warns(UserWarning, match="lr_scheduler.warmup_steps = 20 .* training.steps = 5: warm-up "
                      "is shortened to the run's 5 steps"):
        cfg = load_config(["--training.steps=5", "--lr_scheduler.warmup_steps=20"])
    from trainer.optim import lr_factor

    assert lr_factor(5, 5, cfg.lr_scheduler) == 1.0  # what the warning says: the peak at the last step


def test_deterministic_fill_alone_warns_that_it_changes_nothing():
    with pytest.warns(UserWarning, match="run.deterministic_fill = false .* without run.deterministic"):
        load_config(["--run.deterministic_fill=false"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(["--run.deterministic", "--run.deterministic_fill=false"])


def test_process_writer_without_async_saves_warns_that_it_is_ignored(monkeypatch):
    from trainer.config import checks

    monkeypatch.setattr(checks, "_WARNED", set())  # other tests may have loaded the same override
    with pytest.warns(UserWarning, match=r'async_writer = "process" .* is ignored: checkpoint.async_mode'):
        load_config(["--checkpoint.async_writer=process"])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(["--checkpoint.async_writer=process", "--checkpoint.async_mode=async"])


def test_async_tp_needs_compile():
    with pytest.raises(ConfigError, match="compile.enable"):
        load_config(["--parallelism.enable_async_tensor_parallel"])
    load_config(["--parallelism.enable_async_tensor_parallel", "--compile.enable"])


def test_memory_budget_ac_needs_compile_and_a_share():
    with pytest.raises(ConfigError, match='activation_checkpoint.mode = "memory_budget".*compile.enable'):
        load_config(["--activation_checkpoint.mode=memory_budget"])
    with pytest.raises(ConfigError, match="memory_budget = 1.5: must be 0 <= memory_budget <= 1"):
        load_config(["--activation_checkpoint.mode=memory_budget", "--compile.enable",
                     "--activation_checkpoint.memory_budget=1.5"])
    cfg = load_config(["--activation_checkpoint.mode=memory_budget", "--compile.enable",
                       "--activation_checkpoint.memory_budget=0.3"])
    assert cfg.activation_checkpoint.memory_budget == 0.3


# ---------------------------------------------------------------- round trip


def random_config(rng: random.Random) -> JobConfig:
    """A valid config with every key changed from its default (random values, fixed seed)."""
    cfg = JobConfig()
    chars = "abcXYZ _-./\"\\'\t\n#=[]{}\u00e9\u4e2d\U0001F600"
    for section in sections():
        sec = getattr(cfg, section)
        for key, (tp, _) in section_fields(section).items():
            full = f"{section}.{key}"
            if full in CHOICES:
                value = rng.choice(CHOICES[full])
            elif tp is bool:
                value = rng.random() < 0.5
            elif tp is int:
                value = rng.randint(2, 10_000)
            elif tp is float:
                value = rng.uniform(1e-9, 0.99)
            elif tp is str:
                value = "".join(rng.choice(chars) for _ in range(rng.randint(1, 12)))
            elif tp == list[str]:
                value = ["".join(rng.choice(chars) for _ in range(5)) for _ in range(3)]
            else:  # model.overrides
                value = {"n_layers": rng.randint(1, 9), "norm_eps": rng.uniform(1e-7, 1e-3),
                         "flag": True, "act": "silu", "sizes": [1, 2]}
            setattr(sec, key, value)
    cfg.run.name = "run" + str(rng.randint(0, 99))
    cfg.run.seed = rng.randint(0, 2**32 - 1)
    cfg.activation_checkpoint.selective_ac_option = str(rng.randint(1, 4))
    cfg.parallelism.fsdp_grad_sync = rng.choice(["every_micro_batch", "last_micro_batch",
                                                 f"every_{rng.randint(1, 8)}_micro_batches"])
    cfg.training.global_batch_size = cfg.training.local_batch_size * rng.randint(1, 4)
    cfg.checkpoint.load_step = -1
    cfg.training.steps = cfg.lr_scheduler.warmup_steps + rng.randint(1, 100)
    cfg.parallelism.enable_async_tensor_parallel = cfg.compile.enable
    if cfg.activation_checkpoint.mode == "memory_budget":
        cfg.compile.enable = True
    return cfg


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_round_trip_gives_an_equal_config(tmp_path, seed):
    cfg = random_config(random.Random(seed))
    text = config_to_toml(cfg)
    assert text.isascii()
    f = write(tmp_path / "resolved.toml", text)
    again = load_file(f)
    assert again == cfg
    assert config_to_dict(again) == dataclasses.asdict(cfg)
    assert config_to_toml(again) == text


@settings(max_examples=60, deadline=None)
@given(st.dictionaries(
    st.text(min_size=1, max_size=8),
    st.one_of(st.text(max_size=20), st.integers(-2**63, 2**63 - 1),
              st.floats(allow_nan=False), st.booleans(),
              st.lists(st.one_of(st.text(max_size=5), st.integers()), max_size=4)),
    max_size=6))
def test_writer_round_trips_arbitrary_values(table):
    from trainer.config.toml_writer import dict_to_toml

    data = {"a": {"b": table, "x": 1}}
    assert tomllib.loads(dict_to_toml(data, header="h\nline")) == data


# ---------------------------------------------------------------- validate_config


def test_impossible_batch_names_global_batch_size():
    cfg = load_config(["--training.local_batch_size=3", "--training.global_batch_size=8"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=2)
    msg = str(exc.value)
    assert "training.global_batch_size = 8" in msg
    assert "3 x 2 = 6" in msg and "-1" in msg and "6, 12, 18" in msg
    assert "local_batch_size in 1, 2, 4" in msg  # 8 / dp 2 = 4 per rank


def test_impossible_mesh_is_a_config_error():
    cfg = load_config(["--parallelism.tensor_parallel_degree=2"])
    with pytest.raises(ConfigError, match="world size 3"):
        validate_config(cfg, world_size=3)


def test_validate_rechecks_configs_built_in_code():
    cfg = JobConfig()
    cfg.training.steps = 0
    with pytest.raises(ConfigError, match="default: training.steps = 0: must be >= 1"):
        validate_config(cfg, world_size=1)


# The checks below need the model families (trainer/models, written by another helper).


def families():
    fams = getattr(pytest.importorskip("trainer.models"), "FAMILIES", None)
    if fams is None:
        pytest.skip("trainer.models has no FAMILIES yet")
    return fams


def test_validate_accepts_gradient_accumulation():
    families()
    cfg = load_config(["--training.local_batch_size=2", "--training.global_batch_size=16",
                       "--training.seq_len=64"])
    dims = validate_config(cfg, world_size=4)
    assert dims.dp == 4 and cfg.training.global_batch_size // (2 * dims.dp) == 2


def test_unknown_model_name_and_flavor():
    fams = families()
    with pytest.raises(ConfigError) as exc:
        validate_config(load_config(["--model.name=llama"]), 1)
    assert "model.name" in str(exc.value) and "llama3" in str(exc.value)
    with pytest.raises(ConfigError) as exc:
        validate_config(load_config(["--model.flavor=debugg"]), 1)
    msg = str(exc.value)
    assert "model.flavor" in msg and "did you mean 'debug'" in msg
    assert all(f in msg for f in fams["llama3"].flavors)
    # Another family's flavor: the name is what to change (it suggested 'debug' before).
    with pytest.raises(ConfigError, match=r'command line: model.flavor = "moe_debug" is a flavor of '
                                          r'model.name = "moe", and model.name is "llama3" \(default\); '
                                          r'set model.name = "moe"'):
        validate_config(load_config(["--model.flavor=moe_debug"]), 1)


def test_model_overrides_are_checked_and_applied():
    from trainer.config import resolve_model_args

    fams = families()
    base = fams["llama3"].flavors["debug"]
    cfg = load_config(["--model.overrides.n_layers", str(base.n_layers + 1)])
    args = resolve_model_args(cfg)
    assert args.n_layers == base.n_layers + 1 and type(args) is type(base)
    assert fams["llama3"].flavors["debug"].n_layers == base.n_layers  # the flavor is not mutated
    with pytest.raises(ConfigError, match="model.overrides.n_layer:.*did you mean model.overrides.n_layers"):
        resolve_model_args(load_config(["--model.overrides.n_layer=4"]))
    assert resolve_model_args(load_config(["--model.overrides.n_kv_heads=none"])).n_kv_heads is None
    with pytest.raises(ConfigError, match="command line: model.overrides.n_layers = 'four': expected int"):
        resolve_model_args(load_config(["--model.overrides.n_layers=four"]))


def test_tp_must_divide_heads():
    fams = families()
    heads = fams["llama3"].flavors["debug"].n_heads
    tp = next(t for t in range(2, 64) if heads % t)
    cfg = load_config([f"--parallelism.tensor_parallel_degree={tp}"])
    with pytest.raises(ConfigError, match="tensor_parallel_degree"):
        validate_config(cfg, world_size=tp)


# ---------------------------------------------------------------- python -m trainer.config


def run_cli(*args: str, env_extra: dict | None = None) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONPATH=str(REPO), **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "trainer.config", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("args", [["--help"], ["--config", "configs/debug.toml"]])
def test_cli_tool_into_a_pipe_closed_early_exits_quietly(args):
    """Was: `python -m trainer.config --help | head -3` printed a BrokenPipeError traceback."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader (head -3) is gone: every write fails with EPIPE
    try:
        proc = subprocess.run([sys.executable, "-m", "trainer.config", *args], cwd=REPO,
                              env=dict(os.environ, PYTHONPATH=str(REPO)), stdout=write_end,
                              stderr=subprocess.PIPE, text=True, timeout=120)
    finally:
        os.close(write_end)
    assert proc.stderr == ""
    assert proc.returncode == 141  # as for a tool that SIGPIPE ended (128 + 13)


def test_include_inside_a_section_says_where_include_goes(tmp_path):
    f = write(tmp_path / "inc.toml", '[training]\ninclude = ["base.toml"]\n')
    with pytest.raises(ConfigError, match=r"training.include: include = \[...\] belongs at the top of the "
                       r"file, before the first \[section\] table"):
        load_config(["--config", str(f)])


def test_a_toml_file_with_a_byte_order_mark_loads(tmp_path):
    f = tmp_path / "bom.toml"
    f.write_bytes("\ufeff[training]\nsteps = 7\n".encode())
    assert load_config(["--config", str(f)]).training.steps == 7


def test_cli_tool_reports_unknown_key(tmp_path):
    f = write(tmp_path / "t.toml", "[training]\nsteps = 5\n")
    proc = run_cli("--config", str(f), "--training.stepz=3")
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ")
    assert "training.stepz" in proc.stderr and "training.steps" in proc.stderr
    assert proc.stdout == ""


def test_cli_tool_prints_loadable_resolved_toml(tmp_path):
    families()
    f = write(tmp_path / "t.toml", "[training]\nsteps = 5\nlocal_batch_size = 2\n")
    proc = run_cli("--config", str(f), "--metrics.log_freq=2", "--world-size", "2",
                   "--training.global_batch_size=8")
    assert proc.returncode == 0, proc.stderr
    out = write(tmp_path / "resolved.toml", proc.stdout)
    assert load_file(out) == load_file(f, "--metrics.log_freq=2", "--training.global_batch_size=8")
    # WORLD_SIZE from the environment is used when --world-size is not given: 3 ranks cannot
    # hold a global batch of 8 in micro-batches of 2.
    bad = run_cli("--config", str(f), "--training.global_batch_size=8", env_extra={"WORLD_SIZE": "3"})
    assert bad.returncode == 2 and "training.global_batch_size = 8" in bad.stderr


def test_cli_tool_says_which_world_size_it_checked_and_prints_warnings_as_lines():
    proc = run_cli("--config", "configs/llama3_70b.toml")  # TP 8, checked for 1 rank
    assert proc.returncode == 2 and "world size 1 is not divisible" in proc.stderr
    assert "give the launch's with --world-size N" in proc.stderr
    assert "--world-size N" not in run_cli("--config", "configs/llama3_70b.toml", "--world-size", "7").stderr
    proc = run_cli("--lr_scheduler.warmup_steps=100")
    assert proc.returncode == 0
    assert proc.stderr.startswith("warning: lr_scheduler.warmup_steps = 100 (command line) > training.steps")
    assert "UserWarning" not in proc.stderr and len(proc.stderr.splitlines()) == 1
    # train.sh runs the check with PYTHONWARNINGS=ignore (the ranks print the warnings): nothing then
    assert run_cli("--lr_scheduler.warmup_steps=100", env_extra={"PYTHONWARNINGS": "ignore"}).stderr == ""


@pytest.mark.parametrize("value", ["abc", "0", "-2", "1.5"])
def test_cli_tool_refuses_a_bad_world_size_from_the_environment(monkeypatch, capsys, value):
    """Was: WORLD_SIZE=abc a ValueError traceback, WORLD_SIZE=0 a config "checked" for no ranks."""
    from trainer.config.__main__ import main

    monkeypatch.setenv("WORLD_SIZE", value)
    assert main([]) == 2
    out = capsys.readouterr()
    assert out.out == "" and out.err == (
        f"error: WORLD_SIZE={value!r} (from the environment): expected an integer >= 1; "
        "or give the launch's world size with --world-size N\n")
    monkeypatch.setenv("WORLD_SIZE", "2")
    assert main([]) == 0  # a good one is used


@pytest.mark.parametrize("name,flavor", [("llama3", "debug"), ("moe", "moe_debug")])
def test_model_attention_reaches_every_attention_core(name, flavor):
    """`model.attention` must select the backend the built model actually calls."""
    import torch

    from trainer.config import resolve_model_args
    from trainer.models import FAMILIES

    cfg = load_config([f"--model.name={name}", f"--model.flavor={flavor}", "--model.attention=triton"])
    args = resolve_model_args(cfg)
    with torch.device("meta"):
        model = FAMILIES[name].model_cls(args)
    backends = {block.attention.core.backend for block in model.layers.values()}
    assert backends == {"triton"}
    with pytest.raises(ConfigError, match="conflicts with model.attention"):
        resolve_model_args(load_config(["--model.overrides.attention=reference"]))


def test_sequence_longer_than_the_model_allows_fails_before_any_rank_starts():
    families()
    cfg = load_config(["--training.seq_len=1024", "--model.overrides.max_seq_len=512"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=1)
    msg = str(exc.value)
    assert "training.seq_len = 1024" in msg and "max_seq_len = 512" in msg
    assert "overrides.max_seq_len" in msg
    validate_config(load_config(["--training.seq_len=512", "--model.overrides.max_seq_len=512"]), world_size=1)


def test_thunderkittens_with_document_masks_fails_before_any_rank_starts():
    families()
    cfg = load_config(["--model.attention=thunderkittens", "--data.document_mask"])
    with pytest.raises(ConfigError, match=r"command line: data.document_mask = true: .*\"triton\" or \"sdpa\""):
        validate_config(cfg, world_size=1)
    validate_config(load_config(["--model.attention=triton", "--data.document_mask"]), world_size=1)


def test_tokenizer_larger_than_the_model_vocab_fails_before_any_rank_starts(tmp_path):
    """The README's own data example once failed this way after every rank had started."""
    families()
    from tokenizers import Tokenizer, models

    path = tmp_path / "tokenizer.json"
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(599)}, unk_token="w0"))
    tok.add_special_tokens(["<|end_of_text|>"])  # 600 tokens; the loader needs an EOS token
    tok.save(str(path))
    cfg = load_config([f"--data.tokenizer={path}"])  # the debug model: vocab_size 512
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=1)
    msg = str(exc.value)
    assert "command line: data.tokenizer" in msg and "600 tokens" in msg and "vocab_size 512" in msg
    assert "model.overrides.vocab_size = 600" in msg
    validate_config(load_config([f"--data.tokenizer={path}", "--model.overrides.vocab_size=600"]), world_size=1)
    # An override too small for the tokenizer is what the error names, wherever the tokenizer came from.
    toml = tmp_path / "job.toml"
    toml.write_text(f'[data]\ntokenizer = "{path}"\n')
    with pytest.raises(ConfigError) as exc:
        validate_config(load_config(["--config", str(toml), "--model.overrides.vocab_size=550"]), world_size=1)
    assert str(exc.value).startswith("command line: data.tokenizer")
    assert "vocab_size 550 (model.overrides.vocab_size)" in str(exc.value)
    with pytest.raises(ConfigError, match="command line: data.tokenizer: .*neither 'bytes' nor"):
        validate_config(load_config([f"--data.tokenizer={tmp_path / 'missing.json'}"]), world_size=1)


# ---------------------------------------------------------------- torchtitan keys titankit lacks

from trainer.config.fields import TORCHTITAN_KEYS, all_keys  # noqa: E402

KIND_PHRASE = {
    "renamed": "torchtitan's",  # "torchtitan's name for titankit's X" / "torchtitan's section [x]"
    "inverted": "torchtitan's inverse of titankit's",
    "unsupported": "which titankit does not support: remove it",
    "harmless": "means nothing in titankit",
}


def test_torchtitan_table_is_consistent_with_the_schema():
    titankit = set(all_keys()) | set(sections())
    for path, entry in TORCHTITAN_KEYS.items():
        assert entry.kind in KIND_PHRASE, path
        # An entry for a key titankit now has would hide it: drop the entry when adding the key.
        assert path not in titankit, f"{path} is a titankit key; remove it from TORCHTITAN_KEYS"
        if entry.kind in ("renamed", "inverted"):
            assert entry.target.strip("[]") in titankit, (path, entry.target)
        if entry.kind in ("unsupported", "harmless"):
            assert entry.note, path
    for target in ("parallelism.enable_loss_parallel",):
        assert section_fields("parallelism")[target.split(".")[1]][0] is bool


def _toml_setting(path: str, value: str = "1") -> str:
    """TOML that sets dotted `path` (a section alone gets a key inside it)."""
    parts = path.split(".")
    if len(parts) == 1:
        parts.append("some_key")
    return f"[{'.'.join(parts[:-1])}]\n{parts[-1]} = {value}\n"


@pytest.mark.parametrize("path", sorted(TORCHTITAN_KEYS))
def test_every_torchtitan_entry_explains_itself_and_never_guesses(tmp_path, path):
    entry = TORCHTITAN_KEYS[path]
    f = write(tmp_path / "tt.toml", _toml_setting(path))
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    msg = str(exc.value)
    assert msg.startswith(f"{f}: ") and "\n" not in msg
    assert "did you mean" not in msg and "unknown key" not in msg and "Valid keys" not in msg
    assert KIND_PHRASE[entry.kind] in msg
    assert entry.target in msg and entry.note in msg and entry.instead in msg
    # The command line gets the same explanation (it names the section of an unknown section).
    with pytest.raises(ConfigError) as exc:
        load_config([f"--{path if '.' in path else path + '.some_key'}=1"])
    msg = str(exc.value)
    assert msg.startswith("command line: ") and "did you mean" not in msg


@pytest.mark.parametrize("text, needles", [
    # renamed: the titankit key to write, with the value
    ("[debug]\nseed = 3\n", ["debug.seed = 3: torchtitan's name for titankit's run.seed",
                             "write seed = 3 under [run]"]),
    ('[job]\ndump_folder = "out"\n', ['write dump_folder = "out" under [run]']),
    ('[quantize.linear.float8]\nfilter_fqns = ["output", "w2"]\n',
     ['write filter_fqns = ["output", "w2"] under [float8]']),
    # renamed where the values differ: no value copied
    ('[model]\nhf_assets_path = "./assets"\n', ["titankit's data.tokenizer", "tokenizer.json"]),
    # inverted boolean: the inverted value
    ("[parallelism]\ndisable_loss_parallel = true\n",
     ["write enable_loss_parallel = false under [parallelism]"]),
    ("[parallelism]\ndisable_loss_parallel = false\n",
     ["write enable_loss_parallel = true under [parallelism]"]),
    # unsupported: says so, and what to do instead
    ("[parallelism]\npipeline_parallel_degree = 2\n",
     ["pipeline parallelism, which titankit does not support", "data_parallel_shard_degree"]),
    ("[parallelism]\nexpert_tensor_parallel_degree = 2\n", ["tensor-parallel experts, which titankit"]),
    ("[profiling]\nprofile_freq = 10\n", ["periodic profiling, which titankit does not support",
                                          "profiling.profile_start_step"]),
    ("[training]\nenable_cpu_offload = true\n", ["CPU offloading, which titankit does not support"]),
    # harmless: may be removed
    ("[metrics]\ndisable_color_printing = false\n", ["means nothing in titankit", "remove it"]),
])
def test_torchtitan_keys_get_their_message(tmp_path, text, needles):
    f = write(tmp_path / "tt.toml", text)
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    msg = str(exc.value)
    assert "did you mean" not in msg
    for needle in needles:
        assert needle in msg


def test_torchtitan_keys_on_the_command_line_are_spelled_as_flags():
    with pytest.raises(ConfigError) as exc:
        load_config(["--parallelism.disable_loss_parallel"])
    msg = str(exc.value)
    assert "--parallelism.enable_loss_parallel=false" in msg and "did you mean" not in msg
    with pytest.raises(ConfigError, match=r"command line: \[debug\]: .*titankit's \[run\].*run\.seed"):
        load_config(["--debug.seed=3"])


# The parts of torchtitan v0.2.2's torchtitan/models/llama3/train_configs/debug_model.toml that
# titankit does not have, verbatim (its other keys are titankit's too).
TORCHTITAN_DEBUG_MODEL = """
[job]
dump_folder = "./outputs"
description = "Llama 3 debug training"
print_config = false

[profiling]
enable_profiling = false
save_traces_folder = "profile_trace"
profile_freq = 10
enable_memory_snapshot = false
save_memory_snapshot_folder = "memory_snapshot"

[metrics]
log_freq = 1
disable_color_printing = false
save_tb_folder = "tb"

[model]
name = "llama3"
hf_assets_path = "./tests/assets/tokenizer"

[training]
steps = 10
dataset = "c4_test"

[parallelism]
pipeline_parallel_degree = 1
pipeline_parallel_schedule = "Interleaved1F1B"

[checkpoint]
last_save_model_only = false
export_dtype = "float32"

[compile]
components = ["model", "loss"]

[quantize.linear.float8]
enable_fsdp_float8_all_gather = false
precompute_float8_dynamic_scale_for_fsdp = false
filter_fqns = ["output"]

[validation]
enable = false
dataset = "c4_validation"
freq = 5
steps = 10
"""


def test_all_unknown_keys_of_a_file_come_in_one_error(tmp_path):
    f = write(tmp_path / "debug_model.toml", TORCHTITAN_DEBUG_MODEL + '[run]\nnme = "x"\nseed = "0"\n')
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    msg = str(exc.value)
    lines = msg.splitlines()
    assert lines[0] == f"{f}: 20 problems:"
    for key in ["job.dump_folder", "job.description", "job.print_config", "profiling.profile_freq",
                "profiling.save_memory_snapshot_folder", "metrics.disable_color_printing",
                "metrics.save_tb_folder", "model.hf_assets_path", "training.dataset",
                "parallelism.pipeline_parallel_degree", "parallelism.pipeline_parallel_schedule",
                "checkpoint.last_save_model_only", "checkpoint.export_dtype", "compile.components",
                "quantize.linear.float8.enable_fsdp_float8_all_gather",
                "quantize.linear.float8.precompute_float8_dynamic_scale_for_fsdp",
                "quantize.linear.float8.filter_fqns", "[validation] (enable, dataset, freq, steps)"]:
        assert sum(line.startswith(f"  - {key}") for line in lines) == 1, key
    # A titankit typo and a bad type in the same file: reported too, with the fuzzy hint and the
    # valid keys listed once at the end.
    assert "  - unknown key run.nme; did you mean run.name?" in lines
    assert '  - run.seed = "0": expected an integer' in lines
    assert lines[-1].startswith("Valid keys in [run]: name, dump_folder")
    assert msg.count("did you mean") == 1


def test_unknown_key_without_a_hint_is_punctuated(tmp_path):
    f = write(tmp_path / "p.toml", "[model]\nqqqqzzzz = 1\n")
    with pytest.raises(ConfigError) as exc:
        load_file(f)
    assert str(exc.value) == (f"{f}: unknown key model.qqqqzzzz. Valid keys in [model]: "
                              + ", ".join(section_fields("model")))
    with pytest.raises(ConfigError, match=r"unknown section \[qqqqzzzz\]\. Valid sections: run, "):
        load_config(["--qqqqzzzz.x=1"])


# ---------------------------------------------------------------- data.dataset before start-up


def test_missing_dataset_folder_fails_in_validation(tmp_path):
    missing = tmp_path / "no_shards"
    cfg = load_config([f"--data.dataset={missing}"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=1)
    msg = str(exc.value)
    assert msg.startswith(f'command line: data.dataset = "{missing}": no folder at {missing}')
    assert f"scripts/prepare_data.py --input FILES --output {missing} --tokenizer bytes" in msg
    f = write(tmp_path / "d.toml", f'[data]\ndataset = "{missing}"\n')
    with pytest.raises(ConfigError, match=rf"^{f}: data.dataset = "):
        validate_config(load_file(f), world_size=1)
    with pytest.raises(ConfigError, match=rf"{f} is a file, not a folder"):
        validate_config(load_config([f"--data.dataset={f}"]), world_size=1)


def test_a_raw_corpus_as_dataset_gets_the_command_that_makes_its_shard_folder(tmp_path):
    """data.dataset naming the corpus itself (a .jsonl file, a glob, a missing .txt): the hint
    takes it as --input and proposes a new folder beside it as --output (never the corpus: that
    made prepare_data fail), plus the --data.dataset to train with afterwards."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"text": "a document"}\n')

    def message(spec: str, *extra: str) -> str:
        with pytest.raises(ConfigError) as exc:
            validate_config(load_config([f"--data.dataset={spec}", *extra]), world_size=1)
        return str(exc.value)

    shards = tmp_path / "corpus_shards"
    assert message(str(corpus)) == (
        f'command line: data.dataset = "{corpus}": {corpus} is a file, not a folder; data.dataset is '
        f'"embedded" or a folder of token shards: make one from this file with python '
        f"scripts/prepare_data.py --input {corpus} --output {shards} --tokenizer bytes, then train "
        f"with --data.dataset={shards}")
    # A glob is quoted (prepare_data expands it); its folder is named from the pattern's fixed part,
    # and the run's tokenizer is passed on (quoted too).
    msg = message(str(tmp_path / "corpus-*.jsonl"), f"--data.tokenizer={tmp_path / 'my tok.json'}")
    assert "corpus-*.jsonl is a pattern of files that matches none, not a folder" in msg
    assert f"--input '{tmp_path}/corpus-*.jsonl' --output {shards} --tokenizer '{tmp_path}/my tok.json'" in msg
    msg = message(str(tmp_path / "*.jsonl"))
    assert "(1 match now)" in msg and f"--output {tmp_path / 'shards'} --tokenizer bytes" in msg
    # A missing file named like a corpus: the same command, with a sibling folder.
    assert (f"--input {tmp_path / 'gone.txt'} --output {tmp_path / 'gone_shards'} --tokenizer bytes, then "
            f"train with --data.dataset={tmp_path / 'gone_shards'}") in message(str(tmp_path / "gone.txt"))
    # A sibling name taken by a file is skipped; another kind of file is named as prepare_data's input
    # with the types it reads.
    (tmp_path / "notes_shards").write_text("")
    (tmp_path / "notes.md").write_text("")
    assert (f"--input {tmp_path / 'notes.md'} --output {tmp_path / 'notes_shards_2'} --tokenizer bytes "
            "(it reads .txt, .jsonl, .parquet files)") in message(str(tmp_path / "notes.md"))
    # A shard file of a prepared folder: train on its folder.
    assert prepare([str(corpus)], shards, log=None).total_tokens == 11
    assert message(str(shards / "shard-000000-0000.bin")).endswith(
        f"is a file of the token shard folder {shards}, not a folder; train on the folder: "
        f"--data.dataset={shards}")
    validate_config(load_config([f"--data.dataset={shards}", "--training.seq_len=8"]), world_size=1)


def test_a_shard_folder_every_rank_would_refuse_fails_the_config_check(tmp_path, monkeypatch):
    """What the ranks' data loading refuses (an unfinished prepare_data folder, no shards, shards of
    another tokenizer, fewer tokens than one sample) is one error from the config check that
    train.sh runs before torchrun, not one per rank after start-up."""
    from trainer.data.shards import COMPLETE_MARKER

    def message(folder: Path, *extra: str) -> str:
        with pytest.raises(ConfigError) as exc:
            validate_config(load_config([f"--data.dataset={folder}", *extra]), world_size=1)
        return str(exc.value)

    corpus = tmp_path / "corpus.txt"
    corpus.write_text("one small document\n" * 10)
    shards = tmp_path / "shards"
    tokens = prepare([str(corpus)], shards, log=None).total_tokens
    assert message(shards).startswith(f'command line: data.dataset = "{shards}" holds {tokens} tokens, fewer '
                                      "than one sample of training.seq_len + 1 = 257")
    validate_config(load_config([f"--data.dataset={shards}", f"--training.seq_len={tokens - 1}"]), world_size=1)
    # The same folder read with another tokenizer: the shard and both fingerprints are named.
    from tokenizers import Tokenizer, models

    tok_path = tmp_path / "tokenizer.json"
    tok = Tokenizer(models.WordLevel({f"w{i}": i for i in range(99)}, unk_token="w0"))
    tok.add_special_tokens(["<|end_of_text|>"])
    tok.save(str(tok_path))
    msg = message(shards, f"--data.tokenizer={tok_path}", "--training.seq_len=8")
    assert msg.startswith(f'command line: data.dataset = "{shards}": shard ') and "was made by tokenizer" in msg
    (shards / COMPLETE_MARKER).unlink()  # prepare_data killed before it finished
    assert f"has no {COMPLETE_MARKER}: scripts/prepare_data.py did not finish" in message(shards, "--training.seq_len=8")
    empty = tmp_path / "empty"
    empty.mkdir()
    assert "holds no token shards" in message(empty)
    # A rank under torchrun leaves the folder to its Trainer, which reads the headers next anyway.
    monkeypatch.setenv("LOCAL_RANK", "0")
    validate_config(load_config([f"--data.dataset={empty}"]), world_size=1)


def test_tensorboard_not_installed_fails_the_config_check(monkeypatch):
    """Found before any rank starts (was: an ImportError traceback per rank at start-up)."""
    monkeypatch.setitem(sys.modules, "tensorboard", None)  # how Python marks a module not importable
    with pytest.raises(ConfigError, match=r"^command line: metrics.enable_tensorboard = true needs the "
                       r"tensorboard package, which is not installed: run `pip install tensorboard`"):
        validate_config(load_config(["--metrics.enable_tensorboard"]), world_size=1)
    validate_config(load_config([]), world_size=1)


def test_existing_dataset_folder_and_embedded_pass_validation(tmp_path):
    families()
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("a document of a few words\n" * 20)  # > 257 byte tokens: one sample
    prepare([str(corpus)], tmp_path / "shards", log=None)
    validate_config(load_config([f"--data.dataset={tmp_path / 'shards'}"]), world_size=1)
    validate_config(load_config(["--data.dataset=embedded"]), world_size=1)


# ---------------------------------------------------------------- parallel errors name their source


def test_parallel_errors_name_the_file_and_valid_degrees(tmp_path):
    f = write(tmp_path / "tp8.toml", "[parallelism]\ntensor_parallel_degree = 8\n")
    with pytest.raises(ConfigError) as exc:
        validate_config(load_file(f), world_size=2)
    msg = str(exc.value)
    assert msg.startswith(f"{f}: world size 2 is not divisible")
    assert "tensor_parallel_degree can be 1 or 2" in msg and "\n" not in msg
    # Degrees from a file and the command line: both named, each with its keys.
    with pytest.raises(ConfigError) as exc:
        validate_config(load_file(f, "--parallelism.data_parallel_shard_degree=2"), world_size=8)
    msg = str(exc.value)
    assert msg.startswith(f"command line (data_parallel_shard_degree) and {f} "
                          "(tensor_parallel_degree): parallel degrees multiply to 16")
    assert "data_parallel_shard_degree = 1 (or -1" in msg
    # A bad degree names where that degree was set.
    with pytest.raises(ConfigError, match=r"^command line: parallelism.context_parallel_degree = 0"):
        validate_config(load_file(f, "--parallelism.context_parallel_degree=0"), world_size=8)


def test_llama3_70b_two_gpu_command_in_its_comment_validates():
    families()
    import re

    text = (REPO / "configs" / "llama3_70b.toml").read_text()
    header = text[:text.index("\n[")]
    ngpu = re.search(r"NGPU=(\d+) CONFIG=configs/llama3_70b.toml", header)
    assert ngpu, "the 2-GPU command is gone from configs/llama3_70b.toml's comment"
    overrides = re.findall(r"--[\w.]+=\S+", header[ngpu.end():])
    assert "--model.overrides.n_layers=4" in overrides
    cfg = load_config(["--config", str(REPO / "configs" / "llama3_70b.toml"), *overrides])
    validate_config(cfg, world_size=int(ngpu.group(1)))
