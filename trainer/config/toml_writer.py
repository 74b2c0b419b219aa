"""A small TOML writer for resolved configs (the standard library reads TOML but cannot write it).

Covers what a config holds: strings, ints, floats (inf/nan too), bools, lists, and nested tables
(written as [a.b] headers; tables inside lists as inline tables). Output is ASCII: non-ASCII
characters are written as \\uXXXX escapes, which every TOML reader decodes back.
"""

from __future__ import annotations

import dataclasses
import math
import re
from typing import Any

from trainer.config.schema import JobConfig

_BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")
_ESCAPES = {'"': '\\"', "\\": "\\\\", "\b": "\\b", "\t": "\\t", "\n": "\\n", "\f": "\\f", "\r": "\\r"}


def toml_string(text: str) -> str:
    """A TOML basic string, ASCII only."""
    out = ['"']
    for ch in text:
        code = ord(ch)
        if ch in _ESCAPES:
            out.append(_ESCAPES[ch])
        elif 0x20 <= code < 0x7F:
            out.append(ch)
        elif 0xD800 <= code <= 0xDFFF:
            # A lone surrogate is not a Unicode scalar value; TOML cannot hold it.
            raise ValueError(f"string {text!r} holds a lone surrogate U+{code:04X}")
        elif code <= 0xFFFF:
            out.append(f"\\u{code:04X}")
        else:
            out.append(f"\\U{code:08X}")
    out.append('"')
    return "".join(out)


def toml_key(key: str) -> str:
    return key if _BARE_KEY.fullmatch(key) else toml_string(key)


def toml_value(value: Any) -> str:
    """One value in TOML syntax (tables become inline tables)."""
    if isinstance(value, bool):  # before int: bool is an int subclass
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, float):
        if math.isnan(value):
            return "nan"
        if math.isinf(value):
            return "inf" if value > 0 else "-inf"
        # repr is the shortest text that reads back to the same double; it always has '.' or 'e'.
        return repr(value)
    if isinstance(value, str):
        return toml_string(value)
    if isinstance(value, (list, tuple)):
        return "[" + ", ".join(toml_value(v) for v in value) + "]"
    if isinstance(value, dict):
        inner = ", ".join(f"{toml_key(str(k))} = {toml_value(v)}" for k, v in value.items())
        return "{" + (f" {inner} " if inner else "") + "}"
    raise TypeError(f"cannot write {type(value).__name__} value {value!r} as TOML")


def _write_table(lines: list[str], path: list[str], table: dict[str, Any]) -> None:
    if path:
        if lines:
            lines.append("")
        lines.append("[" + ".".join(toml_key(p) for p in path) + "]")
    subtables = []
    for key, value in table.items():
        if isinstance(value, dict):
            subtables.append((key, value))
        else:
            lines.append(f"{toml_key(str(key))} = {toml_value(value)}")
    for key, value in subtables:
        _write_table(lines, path + [str(key)], value)


def dict_to_toml(data: dict[str, Any], header: str = "") -> str:
    """Write a nested dict as a TOML document (optional leading comment lines)."""
    lines: list[str] = []
    _write_table(lines, [], data)
    comment = "".join(f"# {h}\n" if h else "#\n" for h in header.splitlines())
    return comment + ("\n" if comment else "") + "\n".join(lines) + "\n"


def config_to_dict(cfg: JobConfig) -> dict[str, Any]:
    """The config as plain nested dicts (section -> key -> value), e.g. for wandb's run config."""
    return dataclasses.asdict(cfg)


def config_to_toml(cfg: JobConfig) -> str:
    """The resolved config as TOML text that load_config reads back to an equal JobConfig."""
    return dict_to_toml(
        config_to_dict(cfg),
        header="Resolved titankit config (defaults < TOML files < command line).\n"
        "Load it again with: python -m trainer.train --config <this file>",
    )
