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
