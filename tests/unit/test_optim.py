"""LR schedules and gradient norm/clipping helpers."""

import math

import pytest
import torch

from tests.helpers.one_rank import one_rank_group
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


def _fused_step(params, grads, clip):
    from trainer.optim import clip_grads_

    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True)
    for step_clip in clip:  # one entry per step
        for p, g in zip(ps, grads):
            p.grad = g.clone()
        clip_grads_(opt, ps, step_clip)
        opt.step()
    return ps


def test_clip_folded_into_fused_adamw_equals_scaling_the_grads():
    """With a fused AdamW the clip rides in the optimizer kernel (no extra pass over the grads); the
    weights after the step match clipping first, and a later unclipped step is not scaled again."""
    torch.manual_seed(1)
    params = [torch.randn(16, 8), torch.randn(8)]
    grads = [torch.randn(16, 8) * 5, torch.randn(8) * 5]
    factor = 1.0 / torch.linalg.vector_norm(torch.cat([g.flatten() for g in grads])).item()
    clipped = [g * factor for g in grads]

    folded = _fused_step(params, grads, [factor])
    explicit = _fused_step(params, clipped, [None])
    for a, b in zip(folded, explicit):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    # Step 2 without a clip: the scale of step 1 must not linger.
    folded2 = _fused_step(params, grads, [factor, None])
    ps = [torch.nn.Parameter(p.clone()) for p in params]
    opt = torch.optim.AdamW(ps, lr=1e-2, weight_decay=0.1, fused=True)
    for gs in (clipped, grads):
        for p, g in zip(ps, gs):
            p.grad = g.clone()
        opt.step()
    for a, b in zip(folded2, ps):
        torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
    assert not torch.equal(folded2[0], explicit[0])


def test_clip_without_fused_optimizer_scales_the_grads():
    from trainer.optim import clip_grads_

    p = torch.nn.Parameter(torch.randn(4, 4))
    g = torch.randn(4, 4)
    p.grad = g.clone()
    opt = torch.optim.AdamW([p], lr=1e-2, foreach=True)
    clip_grads_(opt, [p], 0.5)
    assert torch.equal(p.grad, g * 0.5) and getattr(opt, "grad_scale", None) is None


def test_clip_folded_into_fused_adamw_on_fsdp_dtensors():
    """FSDP2 parameters are DTensors: the plain 0-dim grad_scale must work with them as on GPU."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    from trainer.optim import clip_grads_

    with one_rank_group():
        mesh = init_device_mesh("cpu", (1,))
        results = []
        for fold in (True, False):
            torch.manual_seed(0)
            model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Linear(16, 4))
            fully_shard(model, mesh=mesh)
            opt = torch.optim.AdamW(model.parameters(), lr=1e-2, fused=True)
            model(torch.randn(4, 8, generator=torch.Generator().manual_seed(1))).square().sum().backward()
            params = list(model.parameters())
            if fold:
                clip_grads_(opt, params, 0.25)
            else:
                scale_grads_(params, 0.25)
            opt.step()
            results.append([p.to_local().clone() for p in params])
        for a, b in zip(*results):
            torch.testing.assert_close(a, b, rtol=1e-6, atol=1e-7)
