"""The clock/power sampler on a real GPU: NVML readings under a matmul load are plausible."""

from __future__ import annotations

import time

import pytest
import torch

from trainer.gpu_monitor import CLOCK_KEY, POWER_KEY, GpuSampler

pytestmark = pytest.mark.gpu


def test_sampler_reads_the_gpu_while_it_works():
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    pytest.importorskip("pynvml", reason="needs nvidia-ml-py")
    sampler = GpuSampler.for_device(torch.device("cuda", 0), interval_s=0.05)
    assert sampler is not None
    try:
        a = torch.randn(8192, 8192, device="cuda", dtype=torch.bfloat16)
        t0 = time.monotonic()
        while time.monotonic() - t0 < 1.0:  # keep the GPU busy for a second of samples
            for _ in range(20):
                a @ a
            torch.cuda.synchronize()
        got = sampler.take()
    finally:
        sampler.close()
    # H100/H200 SMs run between a few hundred MHz and ~2 GHz; a loaded GPU draws tens to 1,000+ W.
    assert 200 < got[CLOCK_KEY] < 3000, got
    assert 20 < got[POWER_KEY] < 1500, got


def test_step_meter_memory_counts_blocks_another_stream_still_uses():
    """memory/max_active is the allocator's active peak (torchtitan's figure), not max allocated.

    A block freed on one stream while another stream still reads it (FSDP's gathers are like this)
    stays active until that stream is done; max_memory_allocated forgets it at once.
    """
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from trainer.metrics import GIB, StepMeter

    torch.cuda.synchronize()
    torch.cuda.empty_cache()
    # Tensors that earlier tests of the session still hold count in both figures (0.78 GiB in the
    # suite run of docs/perf/2026-12-02_h200_main_recheck_fwd_fence): measure above them.
    base = torch.cuda.memory_allocated()
    meter = StepMeter(1.0, None, device="cuda")  # resets the peaks
    side = torch.cuda.Stream()
    x = torch.zeros(GIB, dtype=torch.uint8, device="cuda")
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        torch.cuda._sleep(1_000_000_000)  # about half a second of a busy side stream
        x.add_(1)
    x.record_stream(side)
    del x  # freed here, in use on `side` until the sleep ends
    y = torch.ones(GIB, dtype=torch.uint8, device="cuda")
    allocated_peak = torch.cuda.max_memory_allocated() - base  # before collect() resets it
    meter.add_step(1)
    out = meter.collect()
    del y
    assert out["memory/max_active(GiB)"] >= (base + 2 * GIB) / GIB, (out, base)  # x and y at once
    assert allocated_peak < 1.5 * GIB, allocated_peak / GIB
    assert out["memory/max_reserved(GiB)"] >= out["memory/max_active(GiB)"]
