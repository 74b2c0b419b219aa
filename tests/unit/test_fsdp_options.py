"""The gradient-accumulation options of FSDP (parallelism.fsdp_grad_sync, fsdp_reshard_after_backward):
when they apply, how many micro-batches a reduction covers, and the warning a user gets when
fsdp_grad_sync would sum gradients in bf16. Training equivalence and collective counts:
tests/distributed/test_grad_sync.py."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import pytest
import torch
from torch.distributed.device_mesh import init_device_mesh
from torch.distributed.fsdp import fully_shard

from tests.helpers.one_rank import one_rank_group
from trainer.config.schema import JobConfig
from trainer.parallel.fsdp import grad_sync_interval, reshard_after_last_backward_only

DIMS = SimpleNamespace(tp=1, dp_replicate=1, dp_shard=1, cp=1)  # a one-rank FSDP group


@pytest.fixture(scope="module")
def sharded():
    with one_rank_group():
        model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
        fully_shard(model, mesh=init_device_mesh("cpu", (1,)))
        yield model


def _cfg(**parallelism) -> JobConfig:
    cfg = JobConfig()
    for key, value in parallelism.items():
        setattr(cfg.parallelism, key, value)
    return cfg


@pytest.mark.parametrize("value", ["last_micro_batch", "every_2_micro_batches"])
@pytest.mark.parametrize("reduce, warns", [("bfloat16", True), ("float32", False)])
def test_sync_warns_when_gradients_would_accumulate_in_bf16(sharded, caplog, reduce, warns, value):
    cfg = _cfg(fsdp_grad_sync=value)
    cfg.training.mixed_precision_reduce = reduce
    with caplog.at_level(logging.INFO):
        assert grad_sync_interval(sharded, DIMS, cfg, grad_accum=4, n_params=100) > 1
    warning = [r.getMessage() for r in caplog.records if r.levelno == logging.WARNING]
    assert bool(warning) == warns
    if warns:
        assert "summed in bf16" in warning[0] and "training.mixed_precision_reduce = float32" in warning[0]


@pytest.mark.parametrize("value, accum, every", [
    ("every_micro_batch", 8, 1), ("last_micro_batch", 8, 8), ("every_2_micro_batches", 8, 2),
    ("every_3_micro_batches", 8, 3),  # reduces after micro-batches 3, 6 and 8
    ("every_16_micro_batches", 8, 8), ("every_1_micro_batches", 8, 1), ("every_2_micro_batches", 1, 1)])
def test_grad_sync_interval(sharded, value, accum, every):
    assert grad_sync_interval(sharded, DIMS, _cfg(fsdp_grad_sync=value), accum, 100) == every


def test_auto_sums_unsharded_only_where_nothing_is_communicated(sharded, caplog):
    """auto = last_micro_batch on a one-rank FSDP group with an fp32 reduce (the same sums, bit for
    bit); every_micro_batch with a bf16 reduce (the sums would round in bf16), with more ranks (the
    reduction order would change), without accumulation or without FSDP."""
    cfg = _cfg(fsdp_grad_sync="auto")
    with caplog.at_level(logging.INFO):
        assert grad_sync_interval(sharded, DIMS, cfg, 4, 100) == 4
    assert any("fsdp_grad_sync = auto: FSDP has one rank" in r.getMessage() for r in caplog.records)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    for dims in (SimpleNamespace(tp=1, dp_replicate=1, dp_shard=2, cp=1),
                 SimpleNamespace(tp=1, dp_replicate=2, dp_shard=1, cp=1),
                 SimpleNamespace(tp=1, dp_replicate=1, dp_shard=1, cp=2)):
        assert grad_sync_interval(sharded, dims, cfg, 4, 100) == 1, dims
    bf16 = _cfg(fsdp_grad_sync="auto")
    bf16.training.mixed_precision_reduce = "bfloat16"
    assert grad_sync_interval(sharded, DIMS, bf16, 4, 100) == 1
    assert grad_sync_interval(sharded, DIMS, cfg, 1, 100) == 1
    assert grad_sync_interval(torch.nn.Linear(2, 2), DIMS, cfg, 4, 100) == 1
    assert JobConfig().parallelism.fsdp_grad_sync == "auto"


def test_accumulation_options_apply_only_with_accumulation_and_fsdp(sharded):
    # (the function, its key, what it returns when the option acts, when it does not)
    for decide, key, on, off in ((grad_sync_interval, "fsdp_grad_sync", 4, 1),
                                 (reshard_after_last_backward_only, "fsdp_reshard_after_backward",
                                  True, False)):
        cfg = _cfg(**{key: "last_micro_batch"})
        assert decide(sharded, DIMS, cfg, 4, 100) == on
        assert decide(sharded, DIMS, cfg, 1, 100) == off, "one micro-batch: nothing to accumulate"
        assert decide(torch.nn.Linear(2, 2), DIMS, cfg, 4, 100) == off, "no FSDP: nothing to gather"
        assert decide(sharded, DIMS, _cfg(**{key: "every_micro_batch"}), 4, 100) == off


@pytest.mark.parametrize("key, value", [("fsdp_reshard_after_backward", "sometimes"),
                                        ("fsdp_grad_sync", "sometimes"),
                                        ("fsdp_grad_sync", "every_0_micro_batches")])
def test_unknown_value_names_the_key_and_the_choices(key, value):
    from trainer.config import load_config

    with pytest.raises(Exception) as err:
        load_config([f"--parallelism.{key}={value}"])
    assert f"parallelism.{key}" in str(err.value)
    assert "last_micro_batch" in str(err.value)


def test_a_typo_of_fsdp_grad_sync_gets_a_suggestion():
    from trainer.config import load_config

    with pytest.raises(Exception, match="did you mean 'last_micro_batch'"):
        load_config(["--parallelism.fsdp_grad_sync=last_microbatch"])
