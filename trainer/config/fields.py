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


def unknown_section_message(section: str, source: str) -> str:
    names = list(sections())
    hint = suggest(section, names)
    msg = f"{source}: unknown section [{section}]"
    if hint:
        msg += f"; did you mean [{hint}]?"
    return msg + f" Valid sections: {', '.join(names)}"


def unknown_key_message(section: str, key: str, source: str) -> str:
    """Message for section.key not in the schema: the closest key of the same section first, then
    the same key in another section (training.lr -> optimizer.lr), then the closest overall."""
    keys = list(section_fields(section))
    hint = suggest(key, keys)
    full_hint = f"{section}.{hint}" if hint else None
    if full_hint is None:
        elsewhere = [f"{s}.{key}" for s in sections() if key in section_fields(s)]
        full_hint = elsewhere[0] if elsewhere else suggest(f"{section}.{key}", all_keys())
    msg = f"{source}: unknown key {section}.{key}"
    if full_hint:
        msg += f"; did you mean {full_hint}?"
    return msg + f" Valid keys in [{section}]: {', '.join(keys)}"


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
