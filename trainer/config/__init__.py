"""titankit's config: typed schema (schema.py), TOML + include + command line, validation.

    cfg = load_config(["--config", "configs/debug.toml", "--training.steps=3"])
    dims = validate_config(cfg, world_size)   # mesh, batch rule, model checks
    text = config_to_toml(cfg)                # the resolved config, loadable again

Every user error raises ConfigError (a ValueError) naming the file or 'command line', the
section.key and what would be valid.
"""

from __future__ import annotations

import sys

from trainer.config.cli import parse_args
from trainer.config.checks import check_values
from trainer.config.fields import ConfigError
from trainer.config.help import format_help
from trainer.config.loader import build_config, deep_merge, load_toml_tree, source_of
from trainer.config.schema import JobConfig
from trainer.config.toml_writer import config_to_dict, config_to_toml
from trainer.config.validate import resolve_model_args, validate_config

__all__ = [
    "ConfigError",
    "JobConfig",
    "config_to_dict",
    "config_to_toml",
    "load_config",
    "resolve_model_args",
    "source_of",
    "validate_config",
]


def load_config(argv: list[str] | None = None) -> JobConfig:
    """Defaults < the --config TOML (with its includes) < command-line overrides; checked.

    `--help` prints every key and exits 0 (SystemExit). Needs no torch and no world size; call
    validate_config(cfg, world_size) for the checks that do.
    """
    args = parse_args(list(sys.argv[1:] if argv is None else argv))
    if args.help:
        print(format_help())
        raise SystemExit(0)
    tree, sources = {}, {}
    if args.config is not None:
        tree, sources = load_toml_tree(args.config)
    tree = deep_merge(tree, args.tree)
    sources.update(args.sources)
    cfg = build_config(tree, sources)
    check_values(cfg)
    return cfg
