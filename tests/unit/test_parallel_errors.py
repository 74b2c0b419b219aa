"""Impossible layouts and unsupported parallel options fail before training, naming degree and rule."""

from __future__ import annotations

import logging

import pytest
import torch

from trainer.config import ConfigError, JobConfig, load_config, validate_config
from trainer.parallel import parallelize
from trainer.parallel.context import ContextParallelAttention
from trainer.parallel.dims import ParallelDims
from trainer.parallel.tensor import async_tp_fused_ops, check_async_tp, enable_async_tp


def test_degrees_must_multiply_to_world_size():
    cfg = load_config(["--parallelism.data_parallel_shard_degree=2",
                       "--parallelism.tensor_parallel_degree=2"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=2)
    msg = str(exc.value)
    assert "multiply to 4" in msg and "world size is 2" in msg and "tp 2" in msg


def test_tp_must_divide_kv_heads():
    # 8 query heads but 2 KV heads: tp=4 divides the former, not the latter.
    cfg = load_config(["--parallelism.tensor_parallel_degree=4", "--model.overrides.n_heads=8",
                       "--model.overrides.n_kv_heads=2"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=4)
    msg = str(exc.value)
    assert "tensor_parallel_degree = 4" in msg and "KV heads (2)" in msg


def test_seq_len_must_split_into_2_cp_tp_chunks():
    cfg = load_config(["--parallelism.tensor_parallel_degree=2",
                       "--parallelism.context_parallel_degree=2", "--training.seq_len=36"])
    with pytest.raises(ConfigError) as exc:
        validate_config(cfg, world_size=4)
    msg = str(exc.value)
    assert "training.seq_len = 36" in msg
    assert "2 x context_parallel_degree x tensor_parallel_degree = 8" in msg


def test_async_tp_needs_cuda_compile_and_tp():
    with pytest.raises(ValueError, match="enable_async_tensor_parallel.*needs CUDA"):
        enable_async_tp(None, "cpu", compile_enabled=True)
    with pytest.raises(ValueError, match="needs compile.enable = true"):
        enable_async_tp(None, "cuda", compile_enabled=False)
    cfg = JobConfig()
    cfg.parallelism.enable_async_tensor_parallel = True
    dims = ParallelDims(1, 1, 1, 1, 1, world_size=1)
    with pytest.raises(ValueError, match="tensor_parallel_degree > 1"):
        parallelize(torch.nn.Module(), dims, cfg)


def test_unknown_family_and_cp_method():
    cfg = JobConfig()
    cfg.model.name = "gpt2"
    with pytest.raises(ValueError, match="model.name = 'gpt2'.*llama3"):
        parallelize(torch.nn.Module(), ParallelDims(1, 1, 1, 1, 1, world_size=1), cfg)
    with pytest.raises(ValueError, match="context_parallel_method = 'ulysses'.*ring.*allgather"):
        ContextParallelAttention(None, "ulysses", "sdpa")


def test_async_tp_check_reads_profiles_and_code(caplog):
    # A real CPU profile of an unfused TP-like matmul has none of the fused ops: one warning.
    a = torch.randn(16, 16)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        (a @ a).sum()
    log = logging.getLogger("titankit")
    log.addHandler(caplog.handler)  # trainer.log may have turned propagation off
    try:
        with caplog.at_level(logging.WARNING, logger="titankit"):
            assert not check_async_tp(prof)
    finally:
        log.removeHandler(caplog.handler)
    assert "were not fused" in caplog.text
    # Inductor output after the micro-pipeline TP pass calls the symm_mem ops.
    code = ["buf3 = torch.ops.symm_mem.fused_all_gather_matmul.default(arg0_1, [arg1_1], 1, '3')",
            "buf9 = torch.ops.symm_mem.fused_matmul_reduce_scatter.default(buf8, arg2_1, 'sum', 1, '3')"]
    assert check_async_tp(code)
    counts = async_tp_fused_ops(code)
    assert counts["fused_all_gather_matmul"] == 1 and counts["fused_matmul_reduce_scatter"] == 1


def test_expert_parallel_needs_a_moe_model_and_divides_the_experts():
    from trainer.config import ConfigError, load_config, validate_config

    dense = load_config(["--parallelism.expert_parallel_degree=2"])
    with pytest.raises(ConfigError, match="expert_parallel_degree = 2 needs a model with experts"):
        validate_config(dense, 2)
    moe = load_config(["--model.name=moe", "--model.flavor=moe_debug",
                       "--parallelism.expert_parallel_degree=3", "--parallelism.data_parallel_shard_degree=3"])
    with pytest.raises(ConfigError, match="must divide the model's 8 experts"):
        validate_config(moe, 3)
