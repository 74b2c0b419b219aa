"""What defines the function a model computes, recorded in every checkpoint so that a resume of the
run's own checkpoint with other model settings is refused instead of silently training another model.

The shape check of a load (checkpoint_folders.check_model_fits) cannot see every change: at dim 128,
n_heads 8 / n_kv_heads 4 and 32 / 16 give the same weight shapes, and rope_theta or norm_eps change
no shape at all, so such a resume loaded, said nothing and continued with a different loss.

An identity is a small JSON-able dict: {"family": model.name, "flavor": model.flavor, "args": the
resolved model args (flavor + model.overrides)}. Every args field is compared except NOT_COMPARED;
a field either side lacks (a checkpoint from another titankit version) is not compared, so adding
a field later does not refuse every older checkpoint. The flavor name is not compared: the args it
resolves to are.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from trainer.data import identity as stream_id
from trainer.data.identity import dumps  # noqa: F401 - the same stored form: one JSON string

# Fields that may change on resume: kernel backends compute the same function (within rounding),
# max_seq_len only sizes the RoPE table (positions below it are unchanged), and the MoE balancing
# coefficients are training settings of the loss and router bias, not of the model's function.
NOT_COMPARED = frozenset({"attention", "norm_backend", "moe_backend", "max_seq_len",
                          "aux_loss_coef", "bias_update_rate"})


def model_identity(family: str, flavor: str, args: Any) -> dict[str, Any]:
    """The identity of the model a run builds: `args` is resolve_model_args(cfg) (a dataclass)."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
    if values.get("n_kv_heads") is None and hasattr(args, "kv_heads"):
        values["n_kv_heads"] = args.kv_heads  # None means n_heads: the same model as saying so
    return {"family": family, "flavor": flavor, "args": values}


def loads(text: Any, where: str) -> dict[str, Any]:
    """Parse a stored identity; `where` names its file for the error."""
    identity = stream_id.loads(text, where, "model settings")
    if not isinstance(identity.get("args", {}), dict):
        raise ValueError(f"{where}: the recorded model settings have no 'args' object: {text!r:.200}")
    return identity


def differences(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The compared keys that differ: "family", else the args fields (in the current args' order)."""
    if "family" in saved and "family" in current and saved["family"] != current["family"]:
        return ["family"]  # another family's fields do not compare one to one
    a, b = saved.get("args", {}), current.get("args", {})
    return [k for k in b if k in a and k not in NOT_COMPARED and a[k] != b[k]]


def unchecked_changes(saved: dict[str, Any], current: dict[str, Any]) -> list[str]:
    """The NOT_COMPARED fields that differ, as 'field saved -> current' (for an INFO line)."""
    a, b = saved.get("args", {}), current.get("args", {})
    return [f"{k} {a[k]!r} -> {b[k]!r}" for k in b if k in a and k in NOT_COMPARED and a[k] != b[k]]


def _config_key(key: str) -> str:
    return "model.name" if key == "family" else f"model.overrides.{key}"


def describe(saved: dict[str, Any], current: dict[str, Any], keys: list[str]) -> list[str]:
    """One line per differing key: '<config key>: saved X, current Y'."""
    def value(identity: dict[str, Any], key: str) -> Any:
        if key == "family":
            return f"{identity['family']!r} (flavor {identity.get('flavor', '?')!r})"
        return repr(identity["args"][key])

    return [f"{_config_key(k)}: saved {value(saved, k)}, current {value(current, k)}" for k in keys]


def _flag_value(value: Any) -> str:
    """A value as the command line takes it (model.overrides converts strings to the field's type)."""
    if value is None:
        return "none"
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)


def resume_hint(saved: dict[str, Any], keys: list[str]) -> str:
    """The command-line overrides that build the saved model again. Overrides win over the flavor,
    so within one family one flag per differing field is enough; across families it is the saved
    name and flavor plus the fields the saved run had overridden (and no model.overrides of this
    run's)."""
    if keys != ["family"]:
        return " ".join(f"--model.overrides.{k}={_flag_value(saved['args'][k])}" for k in keys)
    from trainer.models import FAMILIES

    flags = [f"--model.name={saved['family']}", f"--model.flavor={saved.get('flavor', '?')}"]
    family = FAMILIES.get(saved["family"])
    base = family.flavors.get(saved.get("flavor")) if family is not None else None
    if base is not None:
        flags += [f"--model.overrides.{k}={_flag_value(v)}" for k, v in saved["args"].items()
                  if k not in NOT_COMPARED and hasattr(base, k) and getattr(base, k) != v]
    return " ".join(flags)
