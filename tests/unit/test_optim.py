"""LR schedules and gradient norm/clipping helpers."""

import math

import pytest
import torch

from trainer.config.schema import LRScheduler
from trainer.optim import grad_norm, lr_factor, scale_grads_


@pytest.mark.parametrize("decay", ["cosine", "linear", "wsd"])
def test_schedule_warms_up_then_decays_to_the_floor(decay):
    cfg = LRScheduler(warmup_steps=10, decay_type=decay, decay_ratio=0.2, min_lr_factor=0.1)
    f = [lr_factor(s, 100, cfg) for s in range(1, 101)]
    assert f[0] == pytest.approx(1 / 11) and f[9] == pytest.approx(10 / 11)  # linear warmup
    assert f[10] == 1.0 and f[-1] == pytest.approx(0.1)  # the peak right after warmup, the floor last
    assert all(a >= b - 1e-12 for a, b in zip(f[10:], f[11:]))  # never rises after warmup
    if decay == "wsd":
        assert f[79] == 1.0 and f[80] < 1.0  # stable until the last 20% of the steps


def test_cosine_midpoint():
    cfg = LRScheduler(warmup_steps=0, decay_type="cosine", min_lr_factor=0.0)
    assert lr_factor(1, 101, cfg) == 1.0 and lr_factor(101, 101, cfg) == pytest.approx(0.0)
    assert lr_factor(51, 101, cfg) == pytest.approx(0.5 * (1 + math.cos(math.pi * 0.5)))


def test_grad_norm_and_scaling_match_torch():
    torch.manual_seed(0)
    params = [torch.nn.Parameter(torch.randn(5, 3)), torch.nn.Parameter(torch.randn(7))]
    for p in params:
        p.grad = torch.randn_like(p) * 3
    want = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in params]))
    assert grad_norm(params).item() == pytest.approx(want.item(), rel=1e-6)
    scale_grads_(params, 1.0 / want.item())
    assert grad_norm(params).item() == pytest.approx(1.0, rel=1e-6)
