"""A checkpoint records the model's settings; resuming it as another model is refused, naming each
differing field and the overrides that restore it (trainer/models/identity.py)."""

from __future__ import annotations

import gc

from trainer.config import load_config, resolve_model_args
from trainer.models import identity as model_id


def identity_of(*overrides: str) -> dict:
    cfg = load_config(list(overrides))
    return model_id.model_identity(cfg.model.name, cfg.model.flavor, resolve_model_args(cfg))


def test_the_identity_holds_the_resolved_args_and_survives_json():
    ident = identity_of("--model.overrides.n_heads=16")
    assert ident["family"] == "llama3" and ident["args"]["n_heads"] == 16
    assert ident["args"]["rope_theta"] == 500000.0 and "n_kv_heads" in ident["args"]
    assert model_id.loads(model_id.dumps(ident), "x") == ident


def test_settings_that_keep_the_shapes_are_differences_backends_are_not():
    saved = identity_of()
    now = identity_of("--model.overrides.n_heads=32", "--model.overrides.n_kv_heads=16",
                      "--model.overrides.norm_eps=0.1", "--model.attention=triton",
                      "--model.overrides.max_seq_len=16384")
    keys = model_id.differences(saved, now)
    assert keys == ["n_heads", "n_kv_heads", "norm_eps"]
    assert model_id.describe(saved, now, keys)[0] == "model.overrides.n_heads: saved 8, current 32"
    assert model_id.resume_hint(saved, keys) == ("--model.overrides.n_heads=8 "
                                                 "--model.overrides.n_kv_heads=4 "
                                                 "--model.overrides.norm_eps=1e-05")
    assert model_id.unchecked_changes(saved, now) == ["max_seq_len 8192 -> 16384",
                                                      "attention 'sdpa' -> 'triton'"]
    # The hint's flags build the saved model again.
    again = identity_of("--model.overrides.n_heads=32", "--model.overrides.n_kv_heads=16",
                        "--model.overrides.norm_eps=0.1", *model_id.resume_hint(saved, keys).split())
    assert model_id.differences(saved, again) == []


def test_kv_heads_left_to_default_equal_the_same_count_given():
    """n_kv_heads = None means n_heads: a resume that spells it out builds the same model."""
    saved = identity_of("--model.overrides.n_heads=8", "--model.overrides.n_kv_heads=none")
    assert model_id.differences(saved, identity_of("--model.overrides.n_heads=8",
                                                   "--model.overrides.n_kv_heads=8")) == []


def test_a_field_one_side_lacks_is_not_compared():
    saved = identity_of()
    del saved["args"]["rope_theta"]  # a checkpoint from before the field existed
    assert model_id.differences(saved, identity_of("--model.overrides.rope_theta=10")) == []


def test_another_family_is_named_with_its_flavor_and_overrides():
    saved = identity_of("--model.overrides.n_layers=2")
    now = identity_of("--model.name=moe", "--model.flavor=moe_debug")
    assert model_id.differences(saved, now) == ["family"]
    assert model_id.describe(saved, now, ["family"]) == [
        "model.name: saved 'llama3' (flavor 'debug'), current 'moe' (flavor 'moe_debug')"]
    assert model_id.resume_hint(saved, ["family"]) == ("--model.name=llama3 --model.flavor=debug "
                                                       "--model.overrides.n_layers=2")


def test_a_resume_with_other_heads_is_refused_before_the_first_step(tmp_path, monkeypatch, capsys):
    # At dim 32, 2 heads / 1 kv head and 4 / 2 give the same weight shapes: before the record, the
    # relaunch resumed without a word and trained another model.
    from tests.helpers.one_rank import in_process_trainer_env, tiny_trainer_args
    from trainer.train import main

    def launch(*extra: str) -> int:
        with in_process_trainer_env(monkeypatch):
            return main([*tiny_trainer_args(tmp_path), "--run.name=x", "--checkpoint.enable",
                         "--checkpoint.interval=1", *extra])

    assert launch("--training.steps=1") == 0
    capsys.readouterr()
    assert launch("--training.steps=2", "--model.overrides.n_heads=4",
                  "--model.overrides.n_kv_heads=2") == 2
    err = capsys.readouterr().err
    step1 = tmp_path / "x" / "checkpoint" / "step-1"
    assert (f"[rank0] error: checkpoint {step1} was saved by a model with other settings than this "
            "run builds:\n  model.overrides.n_heads: saved 2, current 4\n  "
            "model.overrides.n_kv_heads: saved 1, current 2\nTo resume it, run with the saved values "
            "(--model.overrides.n_heads=2 --model.overrides.n_kv_heads=1).") in err
    assert not (tmp_path / "x" / "checkpoint" / "step-2").exists()
    # The refused Trainer holds the run lock until it is collected (a process would have exited).
    gc.collect()
    assert launch("--training.steps=2") == 0  # the saved settings resume
