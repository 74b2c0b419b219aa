"""[model.overrides] in a TOML file is typed like every other key: a string where the model field
takes a number or a boolean is an error naming the file and key, not a silent conversion. The
command line (all text) still converts, and "none" stays the TOML spelling of None (TOML has no
null; the resolved config.toml writes an n_kv_heads = none override that way)."""

from __future__ import annotations

from pathlib import Path

import pytest

from trainer.config import ConfigError, config_to_toml, load_config, resolve_model_args


def _load(tmp_path: Path, body: str, *cli: str):
    path = tmp_path / "run.toml"
    path.write_text("[model.overrides]\n" + body)
    return resolve_model_args(load_config(["--config", str(path), *cli])), str(path)


@pytest.mark.parametrize("body, key, fix", [
    ('n_layers = "3"\n', "n_layers", "n_layers = 3"),
    ('norm_eps = "1e-6"\n', "norm_eps", "norm_eps = 1e-06"),
    ('rope_scaling = "false"\n', "rope_scaling", "rope_scaling = false"),
    ('ffn_dim_multiplier = "1.5"\n', "ffn_dim_multiplier", "ffn_dim_multiplier = 1.5"),
])
def test_a_toml_string_for_a_typed_model_field_is_an_error(tmp_path, body, key, fix):
    with pytest.raises(ConfigError) as exc:
        _load(tmp_path, body)
    msg = str(exc.value)
    assert msg.startswith(f"{tmp_path / 'run.toml'}: model.overrides.{key} = \"")
    assert f"write {fix} (without quotes)" in msg


def test_a_string_that_is_no_number_names_what_is_valid(tmp_path):
    with pytest.raises(ConfigError, match=r'run.toml: model.overrides.n_layers = "four": expected an '
                                          r"integer \(a TOML string is not converted\)$"):
        _load(tmp_path, 'n_layers = "four"\n')
    with pytest.raises(ConfigError, match=r'model.overrides.n_layers = "none": expected an integer'):
        _load(tmp_path, 'n_layers = "none"\n')  # n_layers cannot be None


def test_typed_values_none_and_the_command_line_still_work(tmp_path):
    args, _ = _load(tmp_path, 'n_layers = 3\nn_kv_heads = "none"\nattention = "sdpa"\n')
    assert (args.n_layers, args.n_kv_heads) == (3, None)
    args, _ = _load(tmp_path, 'n_layers = "3"\n', "--model.overrides.n_layers=2")  # CLI wins
    assert args.n_layers == 2
    cfg = load_config(["--model.overrides.n_layers=3", "--model.overrides.n_kv_heads=none",
                       "--model.overrides.rope_scaling=false"])
    args = resolve_model_args(cfg)
    assert (args.n_layers, args.n_kv_heads, args.rope_scaling) == (3, None, False)
    # The resolved config (what a run folder's config.toml holds) loads again.
    saved = tmp_path / "config.toml"
    saved.write_text(config_to_toml(cfg))
    assert resolve_model_args(load_config(["--config", str(saved)])) == args
