"""MoE layer and model on one device: routing, permutation, balancing, counts and metrics.

The references here are written per token (a Python loop over tokens and their chosen experts), so
they share nothing with the layer's sort/scatter/grouped-GEMM path.
"""

from __future__ import annotations

import copy
import dataclasses
import logging

import pytest
import torch
import torch.nn.functional as F

import kernels.moe
from trainer.models import FAMILIES
from trainer.models.moe import (
    MoE,
    MoETransformer,
    gather_rows,
    group_rows,
    pad_groups,
    scatter_rows,
)
from trainer.models.moe_args import MOE_FLAVORS

SMALL = dataclasses.replace(MOE_FLAVORS["moe_debug"], dim=64, n_heads=4, n_kv_heads=2,
                            moe_hidden_dim=32, n_layers=3, moe_backend="loop")  # loop: takes fp64


def _moe(seed: int = 0, **changes) -> MoE:
    args = dataclasses.replace(SMALL, **changes)
    torch.manual_seed(seed)
    moe = MoE(args).double()
    for name, p in moe.named_parameters():
        torch.nn.init.normal_(p, std=0.3 if "router" in name else 0.1)
    return moe.train()


def _swiglu(x, w1, w2, w3):
    return (F.silu(x @ w1.T) * (x @ w3.T)) @ w2.T


def _per_token_reference(moe: MoE, x: torch.Tensor) -> torch.Tensor:
    """out_t = sum_j w_tj * expert_{e_tj}(x_t) + shared(x_t), one token at a time."""
    r, ex = moe.router, moe.experts
    outs = []
    for xt in x.reshape(-1, x.shape[-1]):
        logits = r.weight @ xt
        scores = logits.softmax(-1) if r.score_func == "softmax" else logits.sigmoid()
        chosen = torch.topk(scores.detach() + r.expert_bias, r.top_k).indices
        w = scores[chosen]
        if r.route_norm:
            w = w / w.sum()
        w = w * r.route_scale
        out = sum(w[j] * _swiglu(xt, ex.w1[e], ex.w2[e], ex.w3[e]) for j, e in enumerate(chosen.tolist()))
        if moe.shared_experts is not None:
            s = moe.shared_experts
            out = out + _swiglu(xt, s.w1.weight, s.w2.weight, s.w3.weight)
        outs.append(out)
    return torch.stack(outs).view(x.shape)


@pytest.mark.parametrize("score_func,route_norm,scale", [("softmax", False, 1.0), ("softmax", True, 1.0),
                                                          ("sigmoid", True, 2.5), ("sigmoid", False, 1.0)])
def test_router_topk(score_func, route_norm, scale):
    moe = _moe(score_func=score_func, route_norm=route_norm, route_scale=scale)
    moe.router.expert_bias.copy_(torch.randn(moe.n_experts) * 0.2)  # bias must only select
    x = torch.randn(50, SMALL.dim, dtype=torch.float64)
    scores, idx, w = moe.router(x)
    logits = x @ moe.router.weight.T
    want_scores = logits.softmax(-1) if score_func == "softmax" else logits.sigmoid()
    torch.testing.assert_close(scores, want_scores)
    biased = want_scores + moe.router.expert_bias
    for t in range(50):
        chosen = set(idx[t].tolist())
        assert len(chosen) == SMALL.top_k
        # Every chosen expert beats every other on the biased score.
        others = [e for e in range(moe.n_experts) if e not in chosen]
        assert biased[t, list(chosen)].min() > biased[t, others].max()
        want_w = want_scores[t, idx[t]]
        if route_norm:
            want_w = want_w / want_w.sum()
        torch.testing.assert_close(w[t], want_w * scale)


@pytest.mark.parametrize("backend,dtype", [("loop", torch.float64), ("torch", torch.float32)])
def test_moe_layer_matches_per_token_reference(backend, dtype):
    ref = _moe(aux_loss_coef=0.0)
    # Experts 1 and 5 can never be chosen: their groups are empty on every path.
    ref.router.expert_bias[[1, 5]] = -1e3
    moe = copy.deepcopy(ref).to(dtype)
    moe.experts.backend = backend
    x = torch.randn(3, 7, SMALL.dim, dtype=torch.float64)
    g = torch.randn(3, 7, SMALL.dim, dtype=torch.float64)
    xd = x.to(dtype, copy=True).requires_grad_()
    out = moe(xd)
    (out * g.to(dtype)).sum().backward()
    assert moe.step_counts[[1, 5]].sum() == 0 and moe.step_counts.sum() == 21 * SMALL.top_k

    xr = x.clone().requires_grad_()
    want = _per_token_reference(ref, xr)
    (want * g).sum().backward()
    # Max-abs error over max-abs value: fp64 round-off, or fp32's ~1e-7 over sums of ~100 terms.
    rel = 1e-12 if dtype == torch.float64 else 1e-5
    params = dict(moe.named_parameters())
    pairs = [("out", out, want), ("dx", xd.grad, xr.grad)]
    pairs += [(n, params[n].grad, p.grad) for n, p in ref.named_parameters()]
    for name, got, exp in pairs:
        err = (got.double() - exp).abs().max().item() / exp.abs().max().item()
        assert err <= rel, f"{name}: relative error {err:.2e}"
    assert torch.count_nonzero(params["experts.w1"].grad[[1, 5]]) == 0


def test_padded_groups_give_the_same_experts_output(monkeypatch):
    """The CUDA torch._grouped_mm path pads every group to 16 bytes; run that path on CPU."""
    moe = _moe()
    x = torch.randn(13, SMALL.dim, dtype=torch.float64, requires_grad=True)
    counts = torch.tensor([0, 5, 0, 1, 4, 0, 3, 0])
    y1 = moe.experts(x, counts)
    g1 = torch.autograd.grad(y1.sum(), [x, moe.experts.w2])
    monkeypatch.setattr(kernels.moe, "row_alignment", lambda backend, t: 4)
    y4 = moe.experts(x, counts)
    g4 = torch.autograd.grad(y4.sum(), [x, moe.experts.w2])
    torch.testing.assert_close(y4, y1)
    for a, b in zip(g4, g1):
        torch.testing.assert_close(a, b)


def test_permutation_helpers():
    ids = torch.tensor([3, 0, 3, 1, 0, 3])
    dest, order, counts = group_rows(ids, 5)
    assert counts.tolist() == [2, 1, 0, 3, 0]
    assert torch.equal(dest[order], torch.arange(6)) and torch.equal(order[dest], torch.arange(6))
    x = torch.arange(6.0).unsqueeze(1)
    sorted_rows = scatter_rows(x, dest, 6)
    assert sorted_rows.squeeze(1).tolist() == [1, 4, 3, 0, 2, 5]  # stable within an expert
    assert torch.equal(scatter_rows(x, dest, 6, order), sorted_rows)  # the gather form agrees
    assert torch.equal(gather_rows(sorted_rows, dest), x)
    assert torch.equal(gather_rows(sorted_rows, dest, order), x)
    pdest, offs, size = pad_groups(counts, 6, 4)
    assert size % 4 == 0 and size >= 6 + 5 * 3 and offs[-1] == size
    starts = torch.cat([torch.zeros(1, dtype=torch.int32), offs[:-1]])
    assert all(int(s) % 4 == 0 for s in starts)
    assert pdest.tolist() == [0, 1, 4, 8, 9, 10]


def test_token_rows_as_gathers_match_the_expanded_scatter():
    """tokens_to_rows and the permutation forms of scatter/gather (gathers in both directions) give
    the same rows and gradients as expanding each token K times and scattering the copies."""
    from trainer.models.moe import tokens_to_rows

    g = torch.Generator().manual_seed(3)
    t, k, d, e = 13, 3, 5, 6
    ids = torch.randint(0, e, (t * k,), generator=g)
    ids[:k] = 2  # some experts crowded, likely some empty
    dest, order, counts = group_rows(ids, e)
    x = torch.randn(t, d, dtype=torch.float64, generator=g, requires_grad=True)
    w = torch.randn(t * k, d, dtype=torch.float64, generator=g)
    ref = scatter_rows(x.unsqueeze(1).expand(t, k, d).reshape(t * k, d), dest, t * k)
    rows = tokens_to_rows(x, dest, order, k)
    assert torch.equal(rows, ref)
    (gx_ref,) = torch.autograd.grad((gather_rows(ref * 2, dest) * w).sum(), x)
    (gx,) = torch.autograd.grad((gather_rows(rows * 2, dest, order) * w).sum(), x)
    torch.testing.assert_close(gx, gx_ref, rtol=1e-14, atol=1e-14)
    assert torch.autograd.gradcheck(lambda v: tokens_to_rows(v, dest, order, k), (x,))
    assert torch.autograd.gradcheck(lambda v: scatter_rows(v, dest, t * k, order),
                                    (torch.randn(t * k, 2, dtype=torch.float64, requires_grad=True),))
    assert torch.autograd.gradcheck(lambda v: gather_rows(v, dest, order),
                                    (torch.randn(t * k, 2, dtype=torch.float64, requires_grad=True),))
    with pytest.raises(ValueError, match="only for permutations"):
        scatter_rows(rows, dest, t * k + 8, order)


def test_aux_loss_gradient_equals_adding_it_to_the_loss():
    coef, micro = 0.3, 2
    moe = _moe(aux_loss_coef=coef)
    moe.aux_loss_microbatches = micro
    x = torch.randn(2, 9, SMALL.dim, dtype=torch.float64)
    g = torch.randn(2, 9, SMALL.dim, dtype=torch.float64)
    (moe(x) * g).sum().backward()
    injected = {n: p.grad.clone() for n, p in moe.named_parameters()}
    aux_logged = moe.step_aux.item()

    moe.zero_grad()
    moe.aux_loss_coef = 0.0
    out = moe(x)
    scores, idx, _ = moe.router(x.reshape(-1, SMALL.dim))
    _, _, counts = group_rows(idx.reshape(-1), moe.n_experts)
    aux = moe._aux_loss(scores, counts)
    ((out * g).sum() + coef / micro * aux).backward()
    for n, p in moe.named_parameters():
        torch.testing.assert_close(injected[n], p.grad, rtol=1e-12, atol=1e-14, msg=lambda m: f"{n}: {m}")
    assert injected["router.weight"].abs().max() > 0
    assert aux_logged == pytest.approx(aux.item() / micro)
    # Switch loss: E * sum f_e P_e, f = share of routed slots, P = mean probability.
    f = counts.double() / counts.sum()
    assert aux.item() == pytest.approx(moe.n_experts * (f * scores.mean(0)).sum().item())


def _skewed_model(rate: float) -> MoETransformer:
    args = dataclasses.replace(SMALL, n_layers=2, n_dense_layers=1, bias_update_rate=rate,
                               aux_loss_coef=0.0, score_func="sigmoid")
    torch.manual_seed(0)
    model = MoETransformer(args)
    model.init_weights()
    with torch.no_grad():
        # Every token embedding shares a direction mu, and experts 0 and 1 like mu: a strong skew.
        mu = torch.randn(args.dim)
        model.tok_embeddings.weight += 0.5 * mu
        model.layers["1"].moe.router.weight[:2] += 0.1 * mu
    return model.train()


def test_bias_update_moves_a_skewed_load_toward_balance():
    model = _skewed_model(rate=0.01)
    g = torch.Generator().manual_seed(1)
    imbalance = []
    with torch.no_grad():
        for _ in range(60):
            model(torch.randint(0, 512, (8, 64), generator=g))  # 512 tokens, 128 per expert on average
            model.post_optimizer_step()
            imbalance.append(model.metrics()["moe/imbalance_max"])
    # Top-2 of 8: max/mean is at most 4 (two experts take every token); 1 is perfect balance.
    first, last = imbalance[0], sum(imbalance[-20:]) / 20
    assert first > 3.5, f"the synthetic load is not skewed (max/mean {first:.2f})"
    assert last < 1.8, f"imbalance {first:.2f} -> {last:.2f} (last 20 steps)"
    bias = model.layers["1"].moe.router.expert_bias
    assert bias[:2].max() < bias[2:].min()  # the favoured experts were pushed down
    assert model.router_bias_updates == 60

    # Rate 0 leaves the bias (and the skew) alone.
    still = _skewed_model(rate=0.0)
    with torch.no_grad():
        still(torch.randint(0, 512, (4, 32), generator=g))
        still.post_optimizer_step()
    assert torch.count_nonzero(still.layers["1"].moe.router.expert_bias) == 0


def test_moe_debug_forward_backward_and_metrics(caplog):
    family = FAMILIES["moe"]
    args = family.make_args("moe_debug", {"dim": 64, "n_heads": 4, "n_kv_heads": 2})
    with torch.device("meta"):
        model = family.model_cls(args)
    model.to_empty(device="cpu")
    torch.manual_seed(0)
    model.init_weights()
    assert set(model.layers["0"]._modules) >= {"feed_forward"}  # first layer dense
    assert all(hasattr(model.layers[str(i)], "moe") for i in range(1, args.n_layers))
    tokens = torch.randint(0, 512, (2, 32))
    logits = model(tokens)
    assert logits.shape == (2, 32, 512)
    loss = F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())
    loss.backward()
    assert torch.isfinite(loss)
    for name, p in model.named_parameters():
        assert p.grad is not None and torch.isfinite(p.grad).all(), name
        assert p.grad.abs().max() > 0, f"{name} got no gradient"
    with caplog.at_level(logging.WARNING, logger="titankit"):
        assert model.metrics() == {}  # nothing reduced yet: says why, once
    assert "post_optimizer_step() was not called" in caplog.text
    model.post_optimizer_step()
    stats = model.metrics()
    layers = [f"moe/layer{i}_imbalance" for i in range(1, args.n_layers)]
    assert set(stats) == {"moe/imbalance_max", "moe/imbalance_mean", "moe/load_min", "moe/aux_loss", *layers}
    assert stats["moe/imbalance_max"] >= 1.0 and 0.5 < stats["moe/aux_loss"] / (args.n_layers - 1) < 2
    assert model.metrics() == {}  # reset after reading
    assert any(torch.count_nonzero(m.router.expert_bias) for _, m in model.moe_layers())


@pytest.mark.parametrize("flavor", list(MOE_FLAVORS))
def test_param_counts(flavor):
    args = MOE_FLAVORS[flavor]
    with torch.device("meta"):
        model = MoETransformer(args)
    assert args.num_params() == sum(p.numel() for p in model.parameters()) == args.num_params(model)
    emb = args.vocab_size * args.dim
    assert args.num_params(exclude_embedding=True) == args.num_params() - emb
    expert = 3 * args.dim * args.moe_hidden_dim
    inactive = (args.n_experts - args.top_k) * expert * args.n_moe_layers
    assert args.num_active_params() == args.num_params() - inactive
    assert args.flops_per_token(2048) == (6 * args.num_active_params(exclude_embedding=True)
                                          + 12 * args.n_layers * args.dim * 2048)
    if flavor == "moe_16b":
        assert 16.0e9 < args.num_params() < 17.0e9      # 16.48B
        assert 2.0e9 < args.num_active_params() < 3.0e9  # 2.93B (2.67B without the embedding)


def test_bad_args_name_the_field():
    with pytest.raises(ValueError, match="top_k"):
        dataclasses.replace(SMALL, top_k=9)
    with pytest.raises(ValueError, match="score_func"):
        dataclasses.replace(SMALL, score_func="relu")
    with pytest.raises(ValueError, match="moe_backend"):
        dataclasses.replace(SMALL, moe_backend="cutlass")
    with pytest.raises(ValueError, match="multiples of 8"):
        dataclasses.replace(SMALL, moe_hidden_dim=30, moe_backend="torch")
    with pytest.raises(ValueError, match="n_dense_layers"):
        dataclasses.replace(SMALL, n_dense_layers=4)
    assert dataclasses.replace(SMALL, moe_hidden_dim=30, moe_backend="loop").moe_hidden_dim == 30
