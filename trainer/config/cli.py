"""Command-line overrides: --section.key=value, --section.key value, bare booleans, lists.

Forms (precedence: command line > TOML > defaults; a key given twice: the last one wins):
  --config FILE.toml | --config=FILE.toml   the TOML file (optional; defaults without it)
  --training.steps=3 | --training.steps 3   any key; the value is parsed by the key's type
  --metrics.enable_wandb                     a boolean alone means true
  --metrics.enable_wandb=false               (or `--metrics.enable_wandb false`)
  --float8.filter_fqns=output,w2             lists are comma separated; an empty value is []
  --model.overrides.n_layers=4               a model-args field; parsed as int, float, bool or str
  --help | -h                                every key with its type, default and docstring
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from trainer.config.fields import (
    COMMAND_LINE,
    ConfigError,
    parse_bool_text,
    parse_scalar_text,
    parse_text,
    section_fields,
    sections,
    unknown_key_message,
    unknown_section_message,
)
from trainer.config.loader import Sources

OVERRIDES = ("model", "overrides")  # the one free-form table: keys are checked against model args


@dataclass
class ParsedArgs:
    config: str | None = None
    help: bool = False
    tree: dict[str, Any] = field(default_factory=dict)
    sources: Sources = field(default_factory=dict)


def _resolve(name: str) -> tuple[str, str, str | None, Any]:
    """'training.steps' -> (section, key, sub_key, type); sub_key only for model.overrides.X."""
    parts = name.split(".")
    if len(parts) < 2 or not all(parts):
        raise ConfigError(
            f"{COMMAND_LINE}: --{name}: options are --section.key=value (e.g. --training.steps=10);"
            " see --help"
        )
    section, key = parts[0], parts[1]
    if section not in sections():
        raise ConfigError(unknown_section_message(section, COMMAND_LINE))
    fields = section_fields(section)
    if key not in fields:
        raise ConfigError(unknown_key_message(section, key, COMMAND_LINE))
    if (section, key) == OVERRIDES:
        if len(parts) != 3:
            raise ConfigError(
                f"{COMMAND_LINE}: --{name}: set one model-args field at a time, "
                "e.g. --model.overrides.n_layers=4"
            )
        return section, key, parts[2], None
    if len(parts) != 2:
        raise ConfigError(
            f"{COMMAND_LINE}: --{name}: {section}.{key} has no sub-keys; "
            f"write --{section}.{key}=VALUE"
        )
    return section, key, None, fields[key][0]


def parse_args(argv: list[str]) -> ParsedArgs:
    """Split argv into the config path, the help flag and a checked override tree."""
    out = ParsedArgs()
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if arg in ("-h", "--help"):
            out.help = True
            continue
        if not arg.startswith("--"):
            raise ConfigError(
                f"{COMMAND_LINE}: unexpected argument {arg!r}; options look like "
                "--config FILE.toml or --section.key=value (see --help)"
            )
        name, eq, text = arg[2:].partition("=")
        nxt = argv[i] if i < len(argv) else None
        takes_next = nxt is not None and not nxt.startswith("--")
        if name == "config":
            if not eq:
                if not takes_next:
                    raise ConfigError(f"{COMMAND_LINE}: --config needs a file path")
                text, i = nxt, i + 1
            if text == "":  # Path("") is the working directory: an unset variable in --config=$CFG
                raise ConfigError(f"{COMMAND_LINE}: --config is empty; pass a TOML file")
            if out.config is not None:
                raise ConfigError(
                    f"{COMMAND_LINE}: --config given twice ({out.config!r} and {text!r}); "
                    'combine files with include = [...] in the TOML instead'
                )
            out.config = text
            continue
        section, key, sub, tp = _resolve(name)
        if not eq:
            if tp is bool or sub is not None:
                # A bare flag means true; a following true/false (or any value for overrides) is
                # taken as its value.
                if takes_next and (sub is not None or parse_bool_text(nxt) is not None):
                    text, i = nxt, i + 1
                else:
                    text = "true"
            elif takes_next:
                text, i = nxt, i + 1
            else:
                raise ConfigError(f"{COMMAND_LINE}: --{name} needs a value: --{name}=VALUE")
        table = out.tree.setdefault(section, {})
        if sub is not None:
            table.setdefault(key, {})[sub] = parse_scalar_text(text)
            out.sources[f"{section}.{key}.{sub}"] = COMMAND_LINE
        else:
            table[key] = parse_text(text, tp, f"{section}.{key}")
        out.sources[f"{section}.{key}"] = COMMAND_LINE
    return out
