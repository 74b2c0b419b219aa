"""--help: every section.key with its type, default and docstring.

Attribute docstrings (the string literal under a field) are not kept by Python at run time, so
they are read from schema.py's source with `ast`.
"""

from __future__ import annotations

import ast
import inspect
import textwrap
from functools import lru_cache

from trainer.config import schema
from trainer.config.checks import CHOICES
from trainer.config.fields import section_fields, sections, type_name
from trainer.config.toml_writer import toml_value

USAGE = """\
usage: [--config FILE.toml] [--section.key=VALUE | --section.key VALUE | --bool.key[=false]] ...

Precedence: command line > TOML file (and its include = [...] files) > defaults.
Booleans: --section.key alone is true. Lists: comma separated (--float8.filter_fqns=output,w2).
Model args: --model.overrides.FIELD=VALUE replaces a field of the flavor's model args.
"""


@lru_cache(maxsize=None)
def field_docs() -> dict[str, str]:
    """'ClassName.field' -> docstring, for every dataclass in schema.py."""
    tree = ast.parse(inspect.getsource(schema))
    docs: dict[str, str] = {}
    for node in tree.body:
        if not isinstance(node, ast.ClassDef):
            continue
        body = node.body
        for stmt, nxt in zip(body, body[1:] + [None]):
            if (isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name)
                    and isinstance(nxt, ast.Expr) and isinstance(nxt.value, ast.Constant)
                    and isinstance(nxt.value.value, str)):
                docs[f"{node.name}.{stmt.target.id}"] = inspect.cleandoc(nxt.value.value)
    return docs


def key_docs() -> dict[str, str]:
    """'section.key' -> docstring ('' where the schema has none)."""
    docs = field_docs()
    return {
        f"{s}.{k}": docs.get(f"{cls.__name__}.{k}", "")
        for s, cls in sections().items()
        for k in section_fields(s)
    }


def format_help() -> str:
    docs = key_docs()
    lines = [USAGE]
    for section in sections():
        lines.append(f"[{section}]")
        for key, (tp, default) in section_fields(section).items():
            full = f"{section}.{key}"
            choices = f", one of {' | '.join(CHOICES[full])}" if full in CHOICES else ""
            lines.append(f"  --{full}  ({type_name(tp)}, default {toml_value(default)}{choices})")
            for line in textwrap.wrap(docs[full] or "(undocumented)", width=92):
                lines.append(f"      {line}")
        lines.append("")
    return "\n".join(lines)
