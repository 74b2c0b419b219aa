"""LR schedules and gradient norm/clipping helpers."""

import math
import re
import warnings

import pytest
import torch

from tests.helpers.one_rank import one_rank_group
from trainer.config import ConfigError, load_config
from trainer.config.schema import LRScheduler
from trainer.optim import build_lr_scheduler, grad_norm, lr_factor, scale_grads_


# ------------------------------------------------------------------ LR schedule
# Expected factors are torchtitan v0.2.2's (torchtitan/components/lr_scheduler.py at commit
# 73a0e6979dd10b6b1904098eb3c8f62c18ab87ce), worked out by hand for T = 10 steps, W = 2 warm-up
# steps, floor m = 0.1. Step s is 1-based. Warm-up: s / W. Decay steps D = round(ratio x T), at most
# T - W; the steps up to T + 1 - D run at 1; then progress p = (s - (T + 1 - D)) / D.
#   ratio unset (1.0): D = 8, s = 1..3 -> 1/2, 1, 1; s = 4..10 -> p = 1/8 .. 7/8
#   ratio 0.5:         D = 5, s = 1..6 -> 1/2, 1, 1, 1, 1, 1; s = 7..10 -> p = 1/5 .. 4/5
M = 0.1
SHAPES = {
    "linear": lambda p: 1 - p,
    "sqrt": lambda p: 1 - math.sqrt(p),
    "cosine": lambda p: 0.5 * (1 + math.cos(math.pi * p)),
}
WARM_AND_STABLE = {1.0: [0.5, 1.0, 1.0], 0.5: [0.5, 1.0, 1.0, 1.0, 1.0, 1.0]}
PROGRESS = {1.0: [k / 8 for k in range(1, 8)], 0.5: [k / 5 for k in range(1, 5)]}


def expected(decay: str, ratio: float) -> list[float]:
    return WARM_AND_STABLE[ratio] + [M + (1 - M) * SHAPES[decay](p) for p in PROGRESS[ratio]]


def factors(cfg: LRScheduler, total: int = 10, last: int | None = None) -> list[float]:
    return [lr_factor(s, total, cfg) for s in range(1, (last or total) + 1)]


@pytest.mark.parametrize("decay", ["linear", "sqrt", "cosine"])
@pytest.mark.parametrize("ratio", [1.0, 0.5])
def test_schedule_matches_torchtitan_by_hand(decay, ratio):
    kwargs = {} if ratio == 1.0 else {"decay_ratio": ratio}  # unset = torchtitan's None
    cfg = LRScheduler(warmup_steps=2, decay_type=decay, min_lr_factor=M, **kwargs)
    assert factors(cfg) == pytest.approx(expected(decay, ratio), abs=1e-12)
    # torchtitan's virtual last step: the floor is reached one step after the last; beyond it the
    # factor stays there (titankit clamps; torchtitan never evaluates it).
    assert lr_factor(11, 10, cfg) == pytest.approx(M) and lr_factor(14, 10, cfg) == pytest.approx(M)


def test_schedule_in_numbers():
    """The same as above, spelt out for linear: a regression shows up as a different number."""
    lin = LRScheduler(warmup_steps=2, decay_type="linear", min_lr_factor=0.1)
    assert factors(lin) == pytest.approx(
        [0.5, 1, 1, 0.8875, 0.775, 0.6625, 0.55, 0.4375, 0.325, 0.2125], abs=1e-12)
    wsd = LRScheduler(warmup_steps=2, decay_type="linear", decay_ratio=0.5, min_lr_factor=0.1)
    assert factors(wsd) == pytest.approx([0.5, 1, 1, 1, 1, 1, 0.82, 0.64, 0.46, 0.28], abs=1e-12)
    cos = LRScheduler(warmup_steps=2, decay_type="cosine", decay_ratio=0.5, min_lr_factor=0.0)
    assert factors(cos)[6:] == pytest.approx(
        [0.9045084971874737, 0.6545084971874737, 0.34549150281252633, 0.09549150281252633])


def test_decay_ratio_edge_cases():
    def lin(ratio, warmup=2):
        return LRScheduler(warmup_steps=warmup, decay_type="linear", decay_ratio=ratio, min_lr_factor=M)

    # Warm-up + decay overlap: round(0.9 x 10) = 9 > 10 - 2, so D = 8: the same as unset.
    assert factors(lin(0.9)) == pytest.approx(expected("linear", 1.0), abs=1e-12)
    # Python's round (half to even): round(0.25 x 10) = round(2.5) = 2, not 3.
    assert factors(lin(0.25)) == pytest.approx([0.5] + [1.0] * 8 + [M + (1 - M) * 0.5], abs=1e-12)
    # round(0.04 x 10) = 0 decay steps: the lr stays at the peak after warm-up.
    assert factors(lin(0.04), last=12) == [0.5] + [1.0] * 11
    # No warm-up: the first step is at the peak; D = T = 4, p = 1/4, 2/4, 3/4 on steps 2..4.
    assert factors(lin(1.0, warmup=0), total=4) == pytest.approx([1.0, 0.775, 0.55, 0.325])
    # Warm-up longer than the run: W = T, the run ends at the peak.
    assert factors(lin(1.0, warmup=6), total=4) == pytest.approx([0.25, 0.5, 0.75, 1.0])


def test_lambda_lr_counter_is_offset_by_one():
    """LambdaLR's counter is 0 for the first step: step s gets lr_factor(s)."""
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=2.0)
    cfg = LRScheduler(warmup_steps=2, decay_type="sqrt", decay_ratio=0.5, min_lr_factor=M)
    sched = build_lr_scheduler(opt, 10, cfg)
    lrs = []
    for _ in range(10):
        lrs.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx([2 * f for f in expected("sqrt", 0.5)], abs=1e-12)


def test_build_warns_when_decay_ratio_is_cut():
    opt = torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0)
    with pytest.warns(UserWarning, match="decay_ratio = 0.9.*overlap the 2 warm-up steps.*8 steps"):
        build_lr_scheduler(opt, 10, LRScheduler(warmup_steps=2, decay_ratio=0.9))
    with pytest.warns(UserWarning, match="decay_ratio = 0.04 .* rounds to 0 decay steps"):
        build_lr_scheduler(opt, 10, LRScheduler(warmup_steps=2, decay_ratio=0.04))
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # the default (1.0) overlaps warm-up by definition: no warning
        build_lr_scheduler(opt, 10, LRScheduler(warmup_steps=2))


def test_torchtitan_toml_with_decay_ratio_and_cosine(tmp_path):
    """The audit's case: a torchtitan [lr_scheduler] table means the same schedule here."""
    f = tmp_path / "tt.toml"
    f.write_text("[training]\nsteps = 10\n[lr_scheduler]\nwarmup_steps = 2\n"
                 'decay_ratio = 0.5\ndecay_type = "cosine"\nmin_lr_factor = 0.1\n')
    cfg = load_config(["--config", str(f)])
    assert factors(cfg.lr_scheduler, cfg.training.steps) == pytest.approx(
        expected("cosine", 0.5), abs=1e-12)


def test_the_config_accepts_exactly_the_decay_shapes_the_schedule_has():
    from trainer.config.checks import CHOICES
    from trainer.optim import LR_DECAY_SHAPES

    assert set(CHOICES["lr_scheduler.decay_type"]) == set(LR_DECAY_SHAPES)


def test_sqrt_loads_from_the_command_line():
    assert load_config(["--lr_scheduler.decay_type=sqrt"]).lr_scheduler.decay_type == "sqrt"


def test_a_torchtitan_toml_that_leaves_keys_out_gets_torchtitans_defaults(tmp_path):
    """torchtitan v0.2.2's defaults (torchtitan/config/job_config.py): decay_ratio None (1.0 here),
    decay_type linear, min_lr_factor 0; checkpoint interval 500, keep_latest_k 10. (warmup_steps,
    like steps and seq_len, keeps a CPU debug run's size: 10, not torchtitan's 200.)"""
    f = tmp_path / "tt.toml"
    f.write_text("[lr_scheduler]\n[checkpoint]\nenable = true\n")
    cfg = load_config(["--config", str(f)])
    lr = cfg.lr_scheduler
    assert (lr.decay_ratio, lr.decay_type, lr.min_lr_factor) == (1.0, "linear", 0.0)
    assert (cfg.checkpoint.interval, cfg.checkpoint.keep_latest_k) == (500, 10)


# ------------------------------------------------------------------ the removed "wsd"

def test_wsd_is_refused_with_what_to_write_instead():
    """"wsd" was linear decay over the last decay_ratio (default 0.2); decay_ratio now does that for
    every decay_type, so the old name fails at load with the replacement instead of changing meaning."""
    with pytest.raises(ConfigError, match=r'command line: lr_scheduler.decay_type = "wsd": was removed.*'
                       r'decay_type = "linear" with decay_ratio = 0.2'):
        load_config(["--lr_scheduler.decay_type=wsd"])
    cfg = LRScheduler(warmup_steps=2, decay_type="linear", decay_ratio=0.2, min_lr_factor=M)
    # round(0.2 x 10) = 2 decay steps: stable up to step 9, p = 1/2 at step 10.
    assert factors(cfg) == pytest.approx([0.5] + [1.0] * 8 + [0.55], abs=1e-12)


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("key, value, valid", [
    ("decay_type", "exponential", "linear | sqrt | cosine"),
    ("decay_ratio", 0.0, "0 < decay_ratio <= 1"),
    ("decay_ratio", 1.5, "0 < decay_ratio <= 1"),
    ("decay_ratio", float("nan"), "0 < decay_ratio <= 1"),
    ("min_lr_factor", -0.1, "0 <= min_lr_factor <= 1"),
    ("min_lr_factor", 1.1, "0 <= min_lr_factor <= 1"),
    ("warmup_steps", -1, ">= 0"),
])
def test_bad_values_in_code_name_the_key_and_what_is_valid(key, value, valid):
    cfg = LRScheduler()
    setattr(cfg, key, value)
    with pytest.raises(ValueError, match=f"lr_scheduler.{key} = .*must be.*{re.escape(valid)}"):
        build_lr_scheduler(torch.optim.SGD([torch.nn.Parameter(torch.zeros(1))], lr=1.0), 10, cfg)


@pytest.mark.parametrize("arg, valid", [
    ("--lr_scheduler.decay_type=exponential", "linear"),
    ("--lr_scheduler.decay_ratio=0", "0 < decay_ratio <= 1"),
    ("--lr_scheduler.decay_ratio=1.5", "0 < decay_ratio <= 1"),
    ("--lr_scheduler.min_lr_factor=2", "0 <= min_lr_factor <= 1"),
])
def test_bad_values_in_a_config_are_config_errors(arg, valid):
    key = arg[2:].split("=")[0]
    with pytest.raises(ConfigError, match=f"command line: {key} = .*{re.escape(valid)}"):
        load_config([arg])


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
