"""kernels.thunderkittens.bench on CPU: the rounds rotate every implementation through every slot,
the tables give per-round TFLOP/s and medians, and a backend that cannot run gets an "n/a" row
instead of stopping the bench. The kernels and timers are replaced by CPU stand-ins here; the GPU
path is what docs/benchmarks.md records."""

from __future__ import annotations

import itertools

import pytest
import torch
import torch.nn.functional as F

from kernels.thunderkittens import bench


def test_rounds_rotate_every_implementation_through_every_slot():
    names = ["tk", "cudnn", "triton"]
    orders = bench.round_orders(names, 3)
    assert orders[0] == names  # one round keeps the listed order
    for slot in range(3):
        assert sorted(order[slot] for order in orders) == sorted(names)
    assert bench.round_orders(names, 5)[3:] == orders[:2]
    assert bench.round_orders([], 3) == []


def test_a_failing_measurement_is_dropped_with_its_reason():
    calls = itertools.count()

    def flaky():
        if next(calls) == 1:
            raise RuntimeError("no kernel for this GPU\nsecond line")
        return 1.0

    failed = {}
    got = bench._rounds({"a": lambda: 2.0, "b": flaky}, 3, failed)
    assert failed == {"b": "no kernel for this GPU"}
    assert got["a"] == [2.0, 2.0, 2.0] and len(got["b"]) == 1


def test_cooldown_idles_before_every_measurement(monkeypatch):
    events = []
    monkeypatch.setattr(bench.time, "sleep", lambda s: events.append(("idle", s)))
    measures = {n: (lambda n=n: events.append(("measure", n)) or 1.0) for n in ("a", "b")}
    bench._rounds(measures, 2, {}, cooldown=1.5)
    assert events == [("idle", 1.5), ("measure", "a"), ("idle", 1.5), ("measure", "b"),
                      ("idle", 1.5), ("measure", "b"), ("idle", 1.5), ("measure", "a")]
    events.clear()
    bench._rounds(measures, 1, {})  # default: no idling
    assert events == [("measure", "a"), ("measure", "b")]


def test_negative_cooldown_is_refused(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--cooldown", "-1"])
    assert "--cooldown must be >= 0" in capsys.readouterr().err


def _sdpa(q, k, v):
    out = F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                         is_causal=True, enable_gqa=True)
    return out.transpose(1, 2)


def _unavailable(*args):
    raise RuntimeError("triton needs a GPU")


def _fake_timer(monkeypatch, values):
    """bench._time runs the function once (so the lambdas are exercised) and returns the next of
    `values`."""
    it = iter(values)

    def fake(fn, *args, **kwargs):
        fn()
        return next(it)

    monkeypatch.setattr(bench, "_time", fake)


def test_attention_rows_give_medians_and_every_round(monkeypatch):
    impls = {"thunderkittens": _sdpa, "sdpa cudnn": _sdpa, "triton": _unavailable}
    monkeypatch.setattr(bench, "_attention_impls", lambda deterministic: impls)
    # Rounds rotate: round 0 times tk then cudnn, round 1 cudnn then tk, round 2 tk then cudnn;
    # each implementation takes (forward ms, forward+backward ms) per round.
    _fake_timer(monkeypatch, [1.0, 4.0, 2.0, 8.0,     # round 0: tk, cudnn
                              2.0, 8.0, 1.0, 5.0,     # round 1: cudnn, tk
                              1.0, 6.0, 2.0, 8.0])    # round 2: tk, cudnn
    b, hq, hkv, s, d = shape = (1, 4, 2, 64, 16)
    rows = bench.attention_rows("tiny", shape, rounds=3, device="cpu")
    flops = 4.0 * b * hq * s * s * d / 2
    cells = [r.strip("|").split(" | ") for r in rows]
    assert [c[1] for c in cells] == ["thunderkittens", "sdpa cudnn", "triton"]
    tk = cells[0]
    assert len(tk) == 8
    assert tk[2] == "1.000" and tk[4] == "5.000"  # medians of (1, 1, 1) and (4, 5, 6)
    assert tk[5] == f"{3.5 * flops / 5.0 / 1e9:.0f}"
    assert tk[6] == ", ".join(f"{3.5 * flops / t / 1e9:.0f}" for t in (4.0, 5.0, 6.0))
    assert float(tk[7]) == 0.0  # the same function as the reference
    assert cells[2][2] == "n/a: triton needs a GPU"


class _ModeProbe(torch.autograd.Function):
    """Identity that records whether deterministic mode is on when its forward and backward run."""
    seen: list = []

    @staticmethod
    def forward(ctx, x):
        _ModeProbe.seen.append(("fwd", torch.are_deterministic_algorithms_enabled()))
        return x.clone()

    @staticmethod
    def backward(ctx, g):
        _ModeProbe.seen.append(("bwd", torch.are_deterministic_algorithms_enabled()))
        return g


def test_deterministic_row_holds_the_mode_through_the_backward(monkeypatch):
    """The deterministic TK row runs forward and backward in deterministic mode (the TK backward
    reads it when it runs); the other rows, and the caller's mode afterwards, stay as they were."""
    probe = lambda q, k, v: _ModeProbe.apply(_sdpa(q, k, v))  # noqa: E731
    monkeypatch.setattr(bench, "_attention_impls",
                        lambda deterministic: {"thunderkittens": probe,
                                               "sdpa cudnn": _sdpa,
                                               **({"thunderkittens deterministic": probe}
                                                  if deterministic else {})})
    modes = []

    def fake(fn, *args, **kwargs):
        _ModeProbe.seen.clear()
        fn()
        modes.append(list(_ModeProbe.seen))
        return 1.0

    monkeypatch.setattr(bench, "_time", fake)
    rows = bench.attention_rows("tiny", (1, 4, 2, 64, 16), rounds=1, device="cpu",
                                deterministic=True)
    assert [r.split(" | ")[1] for r in rows] == ["thunderkittens", "sdpa cudnn",
                                                 "thunderkittens deterministic"]
    # _time calls in order: tk fwd, tk fwd+bwd, cudnn fwd, cudnn fwd+bwd, det fwd, det fwd+bwd.
    assert modes[1] == [("fwd", False), ("bwd", False)]
    assert modes[5] == [("fwd", True), ("bwd", True)]
    assert not torch.are_deterministic_algorithms_enabled()
    plain = bench.attention_rows("tiny", (1, 4, 2, 64, 16), device="cpu")  # without the flag
    assert [r.split(" | ")[1] for r in plain] == ["thunderkittens", "sdpa cudnn"]


def test_gemm_rows_on_cpu_stand_ins(monkeypatch):
    from kernels.thunderkittens import ops

    def fake_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False):
        return (a.float() @ b.float() * sa * sb).to(out_dtype)

    monkeypatch.setattr(torch, "_scaled_mm", fake_mm)
    monkeypatch.setattr(ops, "fp8_gemm_rowwise",
                        lambda a, b, sa, sb: fake_mm(a, b.t(), sa, sb.reshape(1, -1)))
    _fake_timer(monkeypatch, [float(t) for t in range(1, 13)])
    m, n, k = 32, 64, 128
    rows = bench.gemm_rows("tiny", m, n, k, rounds=2, device="cpu")
    assert len(rows) == 6  # three implementations, rowwise then tensorwise
    for row in rows:
        cells = row.strip("|").split(" | ")
        assert len(cells) == 6 and len(cells[4].split(", ")) == 2
        assert float(cells[5]) == pytest.approx(0.0, abs=1e-2)
