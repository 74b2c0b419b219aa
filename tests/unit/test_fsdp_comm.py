"""parallelism.fsdp_all_gather = copy_engine and fsdp_reduce_scatter = symmetric_memory: what they
need, and the clear errors when it is missing. FSDP's routing of every collective through the
attached objects: tests/distributed/test_fsdp_custom_collectives.py; the real thing on 2 GPUs:
tests/gpu/test_fsdp_copy_engine_gpu.py."""

from __future__ import annotations

import logging
import os
import re

import pytest
import torch

from tests.helpers.one_rank import one_rank_group
from trainer.config.schema import JobConfig
from trainer.parallel import fsdp_comm
from trainer.parallel.dims import ParallelDims
from trainer.parallel.fsdp import apply_fsdp

SETTING = "parallelism.fsdp_all_gather = 'copy_engine'"


def test_the_zero_cta_policy_is_set_before_the_process_group_starts(monkeypatch, caplog):
    monkeypatch.delenv("NCCL_CTA_POLICY", raising=False)
    fsdp_comm.set_cta_policy_env("nccl")
    assert "NCCL_CTA_POLICY" not in os.environ
    fsdp_comm.set_cta_policy_env("copy_engine")
    assert os.environ["NCCL_CTA_POLICY"] == "2"


def test_an_exported_cta_policy_wins_with_a_warning(monkeypatch, caplog):
    monkeypatch.setenv("NCCL_CTA_POLICY", "1")
    log = logging.getLogger("titankit")
    log.addHandler(caplog.handler)  # trainer.log may have turned propagation off
    try:
        with caplog.at_level(logging.WARNING, logger="titankit"):
            fsdp_comm.set_cta_policy_env("copy_engine")
    finally:
        log.removeHandler(caplog.handler)
    assert os.environ["NCCL_CTA_POLICY"] == "1"
    assert any("NCCL_CTA_POLICY=1" in r.getMessage() and "zero-CTA" in r.getMessage() for r in caplog.records)


def test_a_cpu_run_is_refused_before_sharding():
    cfg = JobConfig()
    model = torch.nn.Module()
    model.layers = torch.nn.ModuleDict({"0": torch.nn.Linear(4, 4)})
    with one_rank_group():
        dims = ParallelDims(1, 1, 1, 1, 1, world_size=1)
        dims.build_mesh("cpu")
        with pytest.raises(ValueError, match=r"fsdp_all_gather = 'copy_engine' needs CUDA GPUs and NCCL; "
                                             r"this run is on cpu.*'nccl'"):
            apply_fsdp(model, dims, cfg.training, device_type="cpu", all_gather="copy_engine")
        with pytest.raises(ValueError, match=r"fsdp_reduce_scatter = 'symmetric_memory' needs CUDA GPUs"):
            apply_fsdp(model, dims, cfg.training, device_type="cpu", reduce_scatter="symmetric_memory")
        with pytest.raises(ValueError, match=r"fsdp_all_gather = 'sometimes'.*nccl.*copy_engine"):
            apply_fsdp(model, dims, cfg.training, device_type="cpu", all_gather="sometimes")
        with pytest.raises(ValueError, match=r"fsdp_reduce_scatter = 'sometimes'.*nccl.*symmetric_memory"):
            apply_fsdp(model, dims, cfg.training, device_type="cpu", reduce_scatter="sometimes")


def test_missing_torch_api_and_old_nccl_are_named(monkeypatch):
    monkeypatch.setattr(fsdp_comm, "_fsdp_api", lambda: None)
    with pytest.raises(ValueError, match=re.escape(f"torch {torch.__version__} lacks") + ".*Use 'nccl'"):
        fsdp_comm.check_symmetric_memory_supported(SETTING, "cuda")
    monkeypatch.setattr(fsdp_comm, "_fsdp_api", lambda: (object, object, object))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 27, 7))
    with pytest.raises(ValueError, match=r"NCCL >= 2\.28.*runs NCCL 2\.27\.7"):
        fsdp_comm.check_symmetric_memory_supported(SETTING, "cuda")
    with one_rank_group():  # a gloo group under a CUDA device type (a mis-built mesh)
        with pytest.raises(ValueError, match="needs the NCCL backend; the FSDP group uses gloo"):
            fsdp_comm.check_symmetric_memory_supported(SETTING, "cuda", torch.distributed.group.WORLD)


def test_this_torch_has_what_the_copy_engine_path_uses():
    """torch 2.11 (the GPU machines) through 2.14 (here): FSDP2's custom all-gather and
    reduce-scatter and the NCCL symmetric-memory pool."""
    assert fsdp_comm._fsdp_api() is not None


def test_the_trainers_mixed_backend_counts_as_nccl(monkeypatch):
    """A CUDA run's process group is "cpu:gloo,cuda:nccl" (trainer/distributed.py): NCCL serves the
    gathers. (The first GPU run refused it, when the check compared the whole string.)"""
    monkeypatch.setattr(fsdp_comm, "_fsdp_api", lambda: (object, object, object))
    monkeypatch.setattr(torch.cuda.nccl, "version", lambda: (2, 28, 9))
    monkeypatch.setattr(fsdp_comm.dist, "get_backend", lambda group: "cpu:gloo,cuda:nccl")
    fsdp_comm.check_symmetric_memory_supported(SETTING, "cuda", object())
    monkeypatch.setattr(fsdp_comm.dist, "get_backend", lambda group: "cpu:gloo,cuda:gloo")
    with pytest.raises(ValueError, match="uses cpu:gloo,cuda:gloo"):
        fsdp_comm.check_symmetric_memory_supported(SETTING, "cuda", object())


def test_the_symmetric_objects_register_their_buffers_then_call_nccl(monkeypatch):
    """The objects' own plumbing, with torch's NCCL symmetric memory replaced by a recorder and a
    1-rank gloo group (the real pool needs CUDA: probe_copy_engine_object.py of 2g ran it on an H200)."""
    import contextlib
    import types
    import warnings

    from torch.distributed import ReduceOp
    from torch.distributed.fsdp._fully_shard._fsdp_api import AllGather, ReduceScatter

    seen = {"backend": [], "pools": [], "registered": []}
    fake = types.SimpleNamespace(
        set_backend=seen["backend"].append,
        get_mem_pool=lambda device: seen["pools"].append(device) or "pool",
        rendezvous=lambda t, group: seen["registered"].append((t.data_ptr(), group)))
    monkeypatch.setattr(fsdp_comm, "_fsdp_api", lambda: (AllGather, ReduceScatter, fake))
    monkeypatch.setattr(torch.cuda, "use_mem_pool", lambda pool: contextlib.nullcontext())
    with one_rank_group(), warnings.catch_warnings():
        warnings.simplefilter("error", FutureWarning)  # torch 2.14 deprecates the old collective names
        group = torch.distributed.group.WORLD
        gather, scatter = fsdp_comm.make_symmetric_all_gather(), fsdp_comm.make_symmetric_reduce_scatter()
        assert seen["backend"] == ["NCCL", "NCCL"]
        out = gather.allocate((6,), dtype=torch.float32, device=torch.device("cpu"))
        gather(out, out.narrow(0, 0, 6).fill_(2.0), group)
        assert seen["registered"] == [(out.data_ptr(), group.group_name)] and gather.calls == 1
        src = scatter.allocate((4,), dtype=torch.float32, device=torch.device("cpu")).fill_(3.0)
        dst = scatter.allocate((4,), dtype=torch.float32, device=torch.device("cpu"))
        scatter(dst, src, group, ReduceOp.SUM)
        assert seen["registered"][1:] == [(src.data_ptr(), group.group_name), (dst.data_ptr(), group.group_name)]
        assert torch.equal(dst, src) and scatter.calls == 1
        assert len(seen["pools"]) == 3  # every buffer came from the pool
