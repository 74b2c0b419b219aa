"""Model families: `FAMILIES[model.name]` -> ModelFamily(model_cls, args_cls, flavors).

Model code here is single-device PyTorch; parallelism is applied from outside (trainer/parallel/).
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import dataclass
from typing import Any

import torch.nn as nn

from trainer.models.llama import Llama
from trainer.models.llama_args import LlamaArgs
from trainer.models.llama_flavors import LLAMA3_FLAVORS
from trainer.models.moe import MoEArgs, MoETransformer, MOE_FLAVORS

_UnionType = type(int | None)  # the class of `X | Y` annotations


@dataclass
class ModelFamily:
    model_cls: type[nn.Module]
    """Built as model_cls(args) under torch.device("meta")."""
    args_cls: type
    """Dataclass of the model's shape and backends (has num_params and flops_per_token)."""
    flavors: dict[str, Any]
    """Size presets: flavor name -> args_cls instance."""

    def make_args(self, flavor: str, overrides: dict[str, Any] | None = None) -> Any:
        """A copy of `flavor`'s args with `overrides` (from [model] overrides) applied and validated.

        String values (from the command line) are converted to the field's type."""
        if flavor not in self.flavors:
            raise ValueError(f"[model] flavor {flavor!r} is unknown; valid: {', '.join(self.flavors)}")
        base = self.flavors[flavor]
        hints = typing.get_type_hints(type(base))
        fields = {f.name for f in dataclasses.fields(base) if f.init}
        changes = {}
        for key, value in (overrides or {}).items():
            if key not in fields:
                raise ValueError(f"[model] overrides.{key} is not a model field; valid: {', '.join(sorted(fields))}")
            changes[key] = _coerce(f"model.overrides.{key}", value, hints[key])
        return dataclasses.replace(base, **changes)


def _coerce(where: str, value: Any, hint: Any) -> Any:
    """Convert a CLI string (or TOML int for a float field) to the annotated type; else ValueError."""
    options = typing.get_args(hint) if typing.get_origin(hint) in (typing.Union, _UnionType) else (hint,)
    if value is None or (isinstance(value, str) and value.lower() == "none"):
        if type(None) in options:
            return None
        raise ValueError(f"{where}: None is not allowed")
    for kind in (bool, int, float, str):
        if kind not in options:
            continue
        if isinstance(value, kind) and not (kind is not bool and isinstance(value, bool)):
            return value
        if kind is float and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str):
            try:
                if kind is bool:
                    if value.lower() in ("true", "false"):
                        return value.lower() == "true"
                    continue
                return kind(value)
            except ValueError:
                continue
    names = ", ".join(getattr(o, "__name__", str(o)) for o in options)
    raise ValueError(f"{where} = {value!r}: expected {names}")


FAMILIES: dict[str, ModelFamily] = {
    "llama3": ModelFamily(Llama, LlamaArgs, LLAMA3_FLAVORS),
    "moe": ModelFamily(MoETransformer, MoEArgs, MOE_FLAVORS),
}
