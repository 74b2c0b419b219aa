"""TOML files -> checked nested dicts -> JobConfig.

Each file is checked on its own (unknown sections/keys, types) before merging, so an error names
the file that holds the bad line; one error lists all of a file's problems (a torchtitan key that
titankit lacks is explained from fields.TORCHTITAN_KEYS). `include = ["base.toml", ...]` at the top
level of a file merges the included files first, in order, then the file itself on top (later wins;
tables merge key by key, other values are replaced). Included paths are relative to the including
file.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

from trainer.config.fields import (
    ConfigError,
    Problem,
    coerce,
    format_value,
    problems_message,
    section_fields,
    sections,
    unknown_key_problems,
    unknown_section_problems,
)
from trainer.config.schema import JobConfig

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10: the same parser, packaged separately (a dependency in pyproject.toml)
    import tomli as tomllib

# Dotted key ("training.steps", "model.overrides.n_layers") -> where its value came from.
Sources = dict[str, str]


def deep_merge(base: dict[str, Any], top: dict[str, Any]) -> dict[str, Any]:
    """A new dict: `top` over `base`, recursing into tables present in both."""
    out = dict(base)
    for key, value in top.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def check_tree(tree: dict[str, Any], source: str) -> tuple[dict[str, Any], Sources]:
    """Check one file's (or the command line's) tables against the schema; return the normalised
    tree and the source of every key it sets. Every unknown key and bad value of the tree is
    reported in one ConfigError."""
    out: dict[str, Any] = {}
    srcs: Sources = {}
    problems: list[Problem] = []
    for section, table in tree.items():
        if section not in sections():
            # A bare key at the top level ("steps = 3") is usually a key missing its [section].
            owners = [f"{s}.{section}" for s in sections() if section in section_fields(s)]
            if owners and not isinstance(table, dict):
                problems.append(Problem(
                    f"top-level key {section} = {format_value(table)} is not in a section;"
                    f" did you mean {owners[0]}? (put it under [{owners[0].split('.')[0]}])"
                ))
            else:
                problems += unknown_section_problems(section, table, source)
            continue
        if not isinstance(table, dict):
            problems.append(
                Problem(f"{section} = {format_value(table)}: expected a table ([{section}])"))
            continue
        fields = section_fields(section)
        checked: dict[str, Any] = {}
        for key, value in table.items():
            if key not in fields:
                problems += unknown_key_problems(section, key, value, source)
                continue
            try:
                checked[key] = coerce(value, fields[key][0], f"{section}.{key}", source)
            except ConfigError as e:
                problems.append(Problem(str(e).removeprefix(f"{source}: ")))
                continue
            srcs[f"{section}.{key}"] = source
            if isinstance(checked[key], dict):  # model.overrides: each entry has its own source
                for sub in checked[key]:
                    srcs[f"{section}.{key}.{sub}"] = source
        out[section] = checked
    if problems:
        raise ConfigError(problems_message(source, problems))
    return out, srcs


def _read_toml(path: Path, source: str) -> dict[str, Any]:
    try:
        # utf-8-sig: a byte-order mark (Windows editors write one) is dropped, not a TOML error
        # at line 1, column 1
        text = path.read_bytes().decode("utf-8-sig")
    except FileNotFoundError:
        raise ConfigError(f"{source}: config file {str(path)!r} not found") from None
    except (OSError, UnicodeDecodeError) as e:
        raise ConfigError(f"{path}: cannot read config file: {e}") from None
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as e:
        raise ConfigError(f"{path}: malformed TOML: {e}") from None


def _include_list(data: dict[str, Any], path: Path) -> list[str]:
    inc = data.pop("include", [])
    if isinstance(inc, str):
        inc = [inc]
    if not isinstance(inc, list) or not all(isinstance(p, str) for p in inc):
        raise ConfigError(
            f"{path}: include = {format_value(inc)}: expected a list of file paths, "
            'e.g. include = ["base.toml"] (relative to this file)'
        )
    return inc


def load_toml_tree(
    path: str | os.PathLike, source: str = "command line", _stack: tuple[Path, ...] = ()
) -> tuple[dict[str, Any], Sources]:
    """Read a config file and everything it includes; `source` names who asked for it (for a
    missing file). Returns the merged, checked tree and the source of each key."""
    path = Path(path).expanduser()
    real = path.resolve()
    if real in _stack:
        chain = " -> ".join(str(p) for p in _stack + (real,))
        raise ConfigError(f"{_stack[-1]}: include cycle: {chain}")
    if path.is_dir():
        tomls = sorted(p.name for p in path.glob("*.toml"))[:5]
        hint = f" (it holds {', '.join(tomls)})" if tomls else ""
        raise ConfigError(f"{source}: config file {str(path)!r} is a directory; pass a TOML file{hint}")
    if not path.is_file():
        looked = f" (looked for {real})" if str(real) != str(path) else ""
        raise ConfigError(f"{source}: config file {str(path)!r} not found{looked}")
    data = _read_toml(path, source)
    merged: dict[str, Any] = {}
    srcs: Sources = {}
    for inc in _include_list(data, path):
        inc_path = Path(inc).expanduser()
        if not inc_path.is_absolute():
            inc_path = path.parent / inc_path
        if inc_path.is_dir():
            raise ConfigError(f"{path}: include {inc!r} is a directory ({inc_path.resolve()}); name a "
                              "TOML file in it (include paths are relative to the including file)")
        if not inc_path.is_file():
            raise ConfigError(
                f"{path}: included file {inc!r} not found (looked for {inc_path.resolve()}; "
                "include paths are relative to the including file)"
            )
        sub, sub_srcs = load_toml_tree(inc_path, str(path), _stack + (real,))
        merged = deep_merge(merged, sub)
        srcs.update(sub_srcs)
    own, own_srcs = check_tree(data, str(path))
    srcs.update(own_srcs)
    return deep_merge(merged, own), srcs


def build_config(tree: dict[str, Any], srcs: Sources) -> JobConfig:
    """JobConfig from a checked tree (missing keys take their defaults). The sources are kept on
    the instance (not a dataclass field, so equality ignores them) for later messages."""
    kwargs = {}
    for section, cls in sections().items():
        kwargs[section] = cls(**tree.get(section, {}))
    cfg = JobConfig(**kwargs)
    cfg._sources = dict(srcs)  # type: ignore[attr-defined]
    return cfg


def source_of(cfg: JobConfig, key: str) -> str:
    """Where `key` ("section.key") got its value: a file path, 'command line' or 'default'."""
    return getattr(cfg, "_sources", {}).get(key, "default")
