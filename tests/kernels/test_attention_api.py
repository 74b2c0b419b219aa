"""The attention contract (docs/interfaces.md) for the "reference" and "sdpa" backends on CPU.

The reference is checked against independent float64 math (K/V expanded, softmax, autograd); the
"sdpa" backend and the block (ring) contract are then checked against the reference.
"""

from __future__ import annotations

import logging
import math

import pytest
import torch

from kernels.attention import attention, attention_bwd, attention_fwd, merge_partials


def _naive(q, k, v, causal, q_doc=None, kv_doc=None):
    """float64 softmax attention with K/V expanded over the query heads; returns (out, lse)."""
    g = q.shape[2] // k.shape[2]
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))  # (B, H, S, D)
    kd, vd = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    sq, skv = q.shape[1], k.shape[1]
    keep = torch.ones(1, 1, sq, skv, dtype=torch.bool)
    if causal:
        keep = keep & (torch.arange(skv)[None, :] <= torch.arange(sq)[:, None] + skv - sq)
    if q_doc is not None:
        keep = keep & (q_doc[:, None, :, None] == kv_doc[:, None, None, :])
    s = s.masked_fill(~keep, float("-inf"))
    lse = torch.logsumexp(s, -1)
    # Rows that see no key: probabilities 0 (softmax of all -inf would be NaN, also in autograd).
    dead = ~keep.any(-1, keepdim=True)
    p = torch.softmax(s.masked_fill(dead, 0.0), -1).masked_fill(dead, 0.0)
    return (p @ vd).transpose(1, 2), lse


def _inputs(b, sq, skv, hq, hkv, d, dtype=torch.float32, seed=0):
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(b, sq, hq, d, generator=g).to(dtype)
    k = torch.randn(b, skv, hkv, d, generator=g).to(dtype)
    v = torch.randn(b, skv, hkv, d, generator=g).to(dtype)
    do = torch.randn(b, sq, hq, d, generator=g).to(dtype)
    return q, k, v, do


def _docs(b, s, n_docs, seed=1):
    """Sorted per-token document ids (packed sequences): (B, S) int32."""
    g = torch.Generator().manual_seed(seed)
    cuts = torch.rand(b, s, generator=g) < (n_docs - 1) / max(s, 1)
    return torch.cumsum(cuts.int(), dim=1).int()


CASES = [  # (b, sq, skv, hq, hkv, d, causal, n_docs)
    (2, 17, 17, 4, 1, 16, True, 0),
    (1, 33, 33, 8, 2, 32, True, 6),
    (2, 9, 24, 4, 4, 8, True, 0),  # bottom-right causal, Sq < Skv
    (1, 20, 12, 2, 1, 8, True, 0),  # Sq > Skv: the first 8 queries see nothing
    (1, 15, 15, 6, 2, 16, False, 4),
]


@pytest.mark.parametrize("case", CASES)
def test_reference_matches_naive_math(case):
    b, sq, skv, hq, hkv, d, causal, n_docs = case
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d)
    docs = (_docs(b, sq, n_docs), _docs(b, skv, n_docs)) if n_docs and sq == skv else (None, None)
    out, lse = attention_fwd(q, k, v, causal=causal, q_doc=docs[0], kv_doc=docs[1],
                             backend="reference")
    ref_out, ref_lse = _naive(q, k, v, causal, *docs)
    dead = torch.isinf(ref_lse)  # rows that see no key: out 0, lse -inf by contract
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isinf(lse), dead)
    torch.testing.assert_close(lse[~dead].double(), ref_lse[~dead], atol=1e-5, rtol=1e-5)

    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o64, _ = _naive(*leaves, causal, *docs)
    torch.nan_to_num(o64, nan=0.0).mul(do.double()).sum().backward()
    grads = attention_bwd(do, q, k, v, out, lse, causal=causal, q_doc=docs[0], kv_doc=docs[1],
                          backend="reference")
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got.double(), leaf.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
@pytest.mark.parametrize("case", CASES[:3] + CASES[4:])
def test_differentiable_attention_matches_reference(backend, case):
    b, sq, skv, hq, hkv, d, causal, n_docs = case
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d, seed=3)
    doc = _docs(b, sq, n_docs) if n_docs else None
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    out = attention(*leaves, causal=causal, doc_ids=doc, backend=backend)
    out.backward(do)
    ref_out, _ = _naive(q, k, v, causal, doc, doc)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    _naive(*ref_leaves, causal, doc, doc)[0].mul(do.double()).sum().backward()
    for leaf, ref in zip(leaves, ref_leaves):
        torch.testing.assert_close(leaf.grad.double(), ref.grad, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype,tol", [(torch.float32, 2e-5), (torch.bfloat16, 3e-2)])
@pytest.mark.parametrize("case", CASES)
def test_sdpa_fwd_bwd_pair_matches_reference(case, dtype, tol):
    b, sq, skv, hq, hkv, d, causal, n_docs = case
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d, dtype=dtype, seed=5)
    docs = (_docs(b, sq, n_docs), _docs(b, skv, n_docs)) if n_docs and sq == skv else (None, None)
    kw = dict(causal=causal, q_doc=docs[0], kv_doc=docs[1])
    out, lse = attention_fwd(q, k, v, backend="sdpa", **kw)
    ref_out, ref_lse = attention_fwd(q, k, v, backend="reference", **kw)
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (b, hq, sq)
    torch.testing.assert_close(out.float(), ref_out.float(), atol=tol, rtol=tol)
    torch.testing.assert_close(lse, ref_lse, atol=tol, rtol=tol)
    grads = attention_bwd(do, q, k, v, ref_out, ref_lse, backend="sdpa", **kw)
    ref_grads = attention_bwd(do, q, k, v, ref_out, ref_lse, backend="reference", **kw)
    for got, want in zip(grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), atol=4 * tol, rtol=4 * tol)


@pytest.mark.parametrize("backend", ["reference", "sdpa"])
@pytest.mark.parametrize("with_docs", [False, True])
def test_block_contract_with_global_lse(backend, with_docs):
    """Ring attention: K/V split in two blocks; merging partial outputs by lse gives the full
    attention, and each block's backward with the global out/lse gives that block's gradients."""
    b, s, hq, hkv, d = 1, 24, 4, 2, 16
    q, k, v, do = _inputs(b, s, s, hq, hkv, d, seed=7)
    doc = _docs(b, s, 5) if with_docs else None
    full_out, full_lse = attention_fwd(q, k, v, causal=True, q_doc=doc, kv_doc=doc,
                                       backend="reference")
    full_grads = attention_bwd(do, q, k, v, full_out, full_lse, causal=True, q_doc=doc,
                               kv_doc=doc, backend="reference")
    # Queries = the second half of the sequence; keys split into the first half (all visible
    # before the causal diagonal: causal=False) and the second half (the diagonal block: causal).
    h = s // 2
    qs, dos = q[:, h:], do[:, h:]
    qd = doc[:, h:] if with_docs else None
    blocks = [(slice(0, h), False), (slice(h, s), True)]
    parts = []
    for sl, causal in blocks:
        kd = doc[:, sl] if with_docs else None
        parts.append(attention_fwd(qs, k[:, sl], v[:, sl], causal=causal, q_doc=qd, kv_doc=kd,
                                   backend=backend))
    out, lse = merge_partials(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    torch.testing.assert_close(out, full_out[:, h:].float(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(lse, full_lse[:, :, h:], atol=1e-5, rtol=1e-5)
    dk = torch.zeros_like(k)
    dv = torch.zeros_like(v)
    dq = torch.zeros_like(qs)
    for sl, causal in blocks:
        kd = doc[:, sl] if with_docs else None
        gq, gk, gv = attention_bwd(dos, qs, k[:, sl], v[:, sl], out, lse,
                                   causal=causal, q_doc=qd, kv_doc=kd, backend=backend)
        dq += gq
        dk[:, sl] += gk
        dv[:, sl] += gv
    # Full gradients of the second-half queries only: recompute with dO zero on the first half.
    do_half = torch.cat([torch.zeros_like(do[:, :h]), dos], dim=1)
    ref = attention_bwd(do_half, q, k, v, full_out, full_lse, causal=True, q_doc=doc,
                        kv_doc=doc, backend="reference")
    torch.testing.assert_close(dq, full_grads[0][:, h:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dk, ref[1], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(dv, ref[2], atol=1e-4, rtol=1e-4)


def test_rows_that_see_nothing_are_zero_not_nan():
    q, k, v, do = _inputs(1, 6, 6, 2, 1, 8, seed=9)
    q_doc = torch.tensor([[0, 0, 0, 1, 1, 1]], dtype=torch.int32)
    kv_doc = torch.tensor([[0, 0, 0, 0, 0, 0]], dtype=torch.int32)  # doc 1 has no keys here
    out, lse = attention_fwd(q, k, v, causal=False, q_doc=q_doc, kv_doc=kv_doc,
                             backend="reference")
    assert torch.all(out[:, 3:] == 0) and torch.all(torch.isneginf(lse[:, :, 3:]))
    dq, dk, dv = attention_bwd(do, q, k, v, out, lse, causal=False, q_doc=q_doc, kv_doc=kv_doc,
                               backend="reference")
    assert torch.all(dq[:, 3:] == 0)
    assert all(torch.isfinite(t).all() for t in (dq, dk, dv))


def test_bad_inputs_raise_value_errors():
    q, k, v, _ = _inputs(1, 4, 4, 3, 2, 8)
    with pytest.raises(ValueError, match="multiple of key/value heads"):
        attention(q, k, v)
    q, k, v, _ = _inputs(1, 4, 4, 4, 2, 8)
    with pytest.raises(ValueError, match="unknown backend 'flash'"):
        attention(q, k, v, backend="flash")
    with pytest.raises(ValueError, match="doc_ids"):
        attention(q[:, :2], k, v, doc_ids=torch.zeros(1, 2, dtype=torch.int32))
    with pytest.raises(ValueError, match="both q_doc and kv_doc"):
        attention_fwd(q, k, v, causal=True, q_doc=torch.zeros(1, 4, dtype=torch.int32),
                      backend="reference")
    with pytest.raises(ValueError, match="lse must be"):
        attention_bwd(q, q, k, v, q, torch.zeros(1, 4, 5), causal=True, backend="sdpa")


# ----------------------------------------------------------------------------- the "sdpa" pair


def test_sdpa_pair_op_choice_is_validated():
    from kernels.attention import sdpa

    with pytest.raises(ValueError, match="'cutlass' is not one of"):
        sdpa.set_cuda_pair_op("cutlass")


@pytest.mark.parametrize("sq,skv", [(9, 24), (20, 12), (16, 16)])
def test_sdpa_pair_bottom_right_causal_stays_fused(sq, skv, caplog):
    """Causal Sq != Skv is split into fused calls (prefix + diagonal), not the slow reference."""
    from kernels.attention import sdpa

    sdpa._WARNED.clear()
    q, k, v, do = _inputs(2, sq, skv, 4, 2, 16, seed=11)
    with caplog.at_level(logging.WARNING, logger=sdpa.__name__):
        out, lse = attention_fwd(q, k, v, causal=True, backend="sdpa")
        grads = attention_bwd(do, q, k, v, out, lse, causal=True, backend="sdpa")
    assert "reference math" not in caplog.text
    ref_out, ref_lse = _naive(q, k, v, True)
    dead = torch.isinf(ref_lse)
    torch.testing.assert_close(out.double(), ref_out, atol=1e-5, rtol=1e-5)
    assert torch.equal(torch.isinf(lse), dead)
    torch.testing.assert_close(lse[~dead].double(), ref_lse[~dead], atol=1e-5, rtol=1e-5)
    leaves = [t.double().requires_grad_() for t in (q, k, v)]
    torch.nan_to_num(_naive(*leaves, True)[0], nan=0.0).mul(do.double()).sum().backward()
    for got, leaf in zip(grads, leaves):
        torch.testing.assert_close(got.double(), leaf.grad, atol=1e-4, rtol=1e-4)


GPU_CASES = [  # (b, sq, skv, hq, hkv, d, causal)
    (1, 256, 256, 8, 2, 128, True),  # the diagonal block of ring attention (GQA)
    (2, 128, 256, 4, 4, 64, False),  # a query half against a whole K/V block
    (1, 256, 128, 8, 1, 128, False),  # all queries against half a K/V block (MQA)
    (1, 128, 384, 8, 2, 64, True),  # bottom-right causal, Sq < Skv (split)
    (1, 384, 128, 8, 2, 64, True),  # bottom-right causal, Sq > Skv (dead rows)
]


@pytest.fixture(params=["cudnn", "flash"])
def cuda_pair_op(request):
    from kernels.attention import sdpa

    sdpa.set_cuda_pair_op(request.param)
    yield request.param
    sdpa.set_cuda_pair_op("auto")


@pytest.mark.gpu
@pytest.mark.parametrize("case", GPU_CASES)
def test_sdpa_cuda_pair_matches_reference(case, cuda_pair_op):
    """cuDNN and FlashAttention-2 behind the pair, bf16 on CUDA, against the fp32 reference."""
    from kernels.attention import sdpa

    b, sq, skv, hq, hkv, d, causal = case
    q, k, v, do = (t.cuda() for t in _inputs(b, sq, skv, hq, hkv, d, dtype=torch.bfloat16,
                                             seed=13))
    out, lse = attention_fwd(q, k, v, causal=causal, backend="sdpa")
    assert sdpa.cuda_pair_op(q) == cuda_pair_op
    ref_out, ref_lse = attention_fwd(q, k, v, causal=causal, backend="reference")
    assert out.dtype == torch.bfloat16 and lse.shape == (b, hq, sq) and lse.dtype == torch.float32
    torch.testing.assert_close(out.float(), ref_out.float(), atol=3e-2, rtol=3e-2)
    live = ~torch.isinf(ref_lse)
    assert torch.equal(torch.isinf(lse), ~live)
    torch.testing.assert_close(lse[live], ref_lse[live], atol=3e-2, rtol=3e-2)
    grads = attention_bwd(do, q, k, v, ref_out, ref_lse, causal=causal, backend="sdpa")
    ref_grads = attention_bwd(do, q, k, v, ref_out, ref_lse, causal=causal, backend="reference")
    for got, want in zip(grads, ref_grads):
        assert got.dtype == torch.bfloat16 and got.shape == want.shape
        torch.testing.assert_close(got.float(), want.float(), atol=1.2e-1, rtol=1.2e-1)


@pytest.mark.gpu
def test_sdpa_cuda_pair_takes_a_global_lse(cuda_pair_op):
    """The ring contract on CUDA: two key blocks merged by lse equal the full attention, and each
    block's backward with the global out/lse sums to the full gradients (bf16, GQA, D 128)."""
    b, s, hq, hkv, d = 1, 512, 8, 2, 128
    q, k, v, do = (t.cuda() for t in _inputs(b, s, s, hq, hkv, d, dtype=torch.bfloat16, seed=17))
    h = s // 2
    qs, dos = q[:, h:], do[:, h:]
    blocks = [(slice(0, h), False), (slice(h, s), True)]
    parts = [attention_fwd(qs, k[:, sl], v[:, sl], causal=c, backend="sdpa") for sl, c in blocks]
    out, lse = merge_partials(parts[0][0], parts[0][1], parts[1][0], parts[1][1])
    full_out, full_lse = attention_fwd(q, k, v, causal=True, backend="reference")
    torch.testing.assert_close(out, full_out[:, h:].float(), atol=3e-2, rtol=3e-2)
    torch.testing.assert_close(lse, full_lse[:, :, h:], atol=3e-2, rtol=3e-2)
    out = out.to(q.dtype)
    dq = torch.zeros(qs.shape, dtype=torch.float32, device="cuda")
    dk = torch.zeros(k.shape, dtype=torch.float32, device="cuda")
    dv = torch.zeros(v.shape, dtype=torch.float32, device="cuda")
    for sl, c in blocks:
        gq, gk, gv = attention_bwd(dos, qs, k[:, sl], v[:, sl], out, lse, causal=c,
                                   backend="sdpa")
        dq += gq.float()
        dk[:, sl] += gk.float()
        dv[:, sl] += gv.float()
    do_half = torch.cat([torch.zeros_like(do[:, :h]), dos], dim=1)
    ref = attention_bwd(do_half, q, k, v, full_out, full_lse, causal=True, backend="reference")
    torch.testing.assert_close(dq, ref[0][:, h:].float(), atol=1.2e-1, rtol=1.2e-1)
    torch.testing.assert_close(dk, ref[1].float(), atol=1.2e-1, rtol=1.2e-1)
    torch.testing.assert_close(dv, ref[2].float(), atol=1.2e-1, rtol=1.2e-1)
