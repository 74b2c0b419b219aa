"""Triton attention kernels in Triton's CPU interpreter against the fp32 reference.

TRITON_INTERPRET=1 must be set before the kernels are decorated (when kernels.attention.triton_fwd
is first imported), so it is set here at import time. The interpreter computes bf16 tl.dot wrongly
on this stack, so fp32 and fp16 are tested here and bf16 in tests/gpu/test_attention_gpu.py.
The interpreter runs query/key blocks of 32/16 (forward, dQ) and 16/32 (dK/dV): small odd lengths
still cover several blocks, tails, and blocks of unequal sizes.
"""

from __future__ import annotations

import math
import os

os.environ["TRITON_INTERPRET"] = "1"


import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from kernels.attention import attention, attention_bwd, attention_fwd, merge_partials  # noqa: E402
from kernels.attention import triton_blocks, triton_launch  # noqa: E402
from tests.helpers.triton_interp import interpreted_kernels  # noqa: E402,F401  (module fixture)




def _set(monkeypatch, **fields):
    """Change triton_launch.SETTINGS fields for one test."""
    for name, value in fields.items():
        monkeypatch.setattr(triton_launch.SETTINGS, name, value)

TOL = {torch.float32: (1e-4, 1e-4), torch.float16: (4e-3, 4e-3)}  # (atol, rtol) of out and lse
GRAD_TOL = {torch.float32: (2e-4, 2e-4), torch.float16: (1.5e-2, 1e-2)}


def _inputs(b, sq, skv, hq, hkv, d, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    make = lambda *shape: torch.randn(*shape, generator=g).to(dtype)  # noqa: E731
    return make(b, sq, hq, d), make(b, skv, hkv, d), make(b, skv, hkv, d), make(b, sq, hq, d)


def _docs(b, s, mean_len, seed):
    """Packed-sequence document ids (B, S) int32: sorted, documents of random short lengths."""
    g = torch.Generator().manual_seed(seed)
    return torch.cumsum((torch.rand(b, s, generator=g) < 1.0 / mean_len).int(), dim=1).int()


CASES = [  # b, sq, skv, hq, hkv, d, causal, dtype, mean document length (0: no documents)
    (1, 1, 1, 2, 1, 16, True, torch.float32, 0),
    (2, 17, 17, 4, 1, 32, True, torch.float32, 0),
    (1, 100, 100, 8, 1, 16, True, torch.float16, 0),
    (1, 129, 129, 2, 2, 64, True, torch.float16, 0),
    (1, 64, 64, 2, 1, 128, True, torch.float32, 0),
    (1, 33, 70, 4, 2, 16, True, torch.float32, 0),  # bottom-right causal, Sq < Skv
    (1, 50, 20, 2, 2, 16, True, torch.float32, 0),  # Sq > Skv: first 30 rows see nothing
    (2, 45, 45, 2, 1, 16, False, torch.float16, 0),
    (1, 129, 129, 4, 1, 16, True, torch.float32, 8),  # many short documents
    (2, 64, 64, 4, 2, 32, False, torch.float16, 12),
]


@pytest.mark.parametrize("case", CASES, ids=lambda c: "-".join(map(str, c)).replace("torch.", ""))
def test_forward_and_backward_match_reference(case):
    b, sq, skv, hq, hkv, d, causal, dtype, doc_len = case
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d, dtype, seed=sq + d)
    docs = (_docs(b, sq, doc_len, 1),) * 2 if doc_len else (None, None)
    kw = dict(causal=causal, q_doc=docs[0], kv_doc=docs[1])
    out, lse = attention_fwd(q, k, v, backend="triton", **kw)
    ref_out, ref_lse = attention_fwd(q, k, v, backend="reference", **kw)
    atol, rtol = TOL[dtype]
    assert out.dtype == dtype and lse.dtype == torch.float32 and lse.shape == (b, hq, sq)
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol, rtol=rtol)
    assert torch.equal(torch.isinf(lse), torch.isinf(ref_lse))  # rows that see nothing: -inf
    live = torch.isfinite(ref_lse)
    torch.testing.assert_close(lse[live], ref_lse[live], atol=atol, rtol=rtol)
    grads = attention_bwd(do, q, k, v, ref_out, ref_lse, backend="triton", **kw)
    ref_grads = attention_bwd(do, q, k, v, ref_out, ref_lse, backend="reference", **kw)
    atol, rtol = GRAD_TOL[dtype]
    for name, got, want in zip("dq dk dv".split(), grads, ref_grads):
        assert got.dtype == dtype and got.shape == want.shape, name
        torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol, msg=name)


BWD_VARIANTS = {  # name -> SETTINGS fields of a backward variant
    "atomic": dict(dq_mode="atomic"),
    "tma-atomic": dict(dq_mode="tma_atomic"),
    "heads-inner": dict(dkdv_heads_inner=True),
    "tma-loads": dict(dkdv_tma=True, dq_tma=True),
    "all": dict(dq_mode="tma_atomic", dkdv_tma=True, dkdv_heads_inner=True),
}
VARIANT_CASES = [  # (variant, case): every variant meets GQA, Sq != Skv, batch tails and documents
    ("atomic", CASES[2]), ("atomic", CASES[6]), ("atomic", CASES[8]),
    ("tma-atomic", CASES[1]), ("tma-atomic", CASES[5]), ("tma-atomic", CASES[8]),
    ("heads-inner", CASES[2]), ("heads-inner", CASES[6]), ("heads-inner", CASES[9]),
    ("tma-loads", CASES[1]), ("tma-loads", CASES[5]), ("tma-loads", CASES[8]),
    ("all", CASES[1]), ("all", CASES[3]), ("all", CASES[6]), ("all", CASES[9]),
]


@pytest.mark.parametrize(
    "variant,case", VARIANT_CASES,
    ids=[f"{v}-" + "-".join(map(str, c)).replace("torch.", "") for v, c in VARIANT_CASES],
)
def test_backward_variants_match_reference(variant, case, monkeypatch):
    """dQ by element or TMA atomics, Q/dO and K/V through TMA descriptors, heads-inner order."""
    _set(monkeypatch, **BWD_VARIANTS[variant])
    b, sq, skv, hq, hkv, d, causal, dtype, doc_len = case
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d, dtype, seed=sq + 1)
    docs = (_docs(b, sq, doc_len, 1),) * 2 if doc_len else (None, None)
    kw = dict(causal=causal, q_doc=docs[0], kv_doc=docs[1])
    out, lse = attention_fwd(q, k, v, backend="reference", **kw)
    grads = attention_bwd(do, q, k, v, out, lse, backend="triton", **kw)
    ref_grads = attention_bwd(do, q, k, v, out, lse, backend="reference", **kw)
    atol, rtol = GRAD_TOL[dtype]
    for name, got, want in zip("dq dk dv".split(), grads, ref_grads):
        assert got.dtype == dtype and got.is_contiguous(), name
        torch.testing.assert_close(got.float(), want.float(), atol=atol, rtol=rtol, msg=name)


def test_deterministic_mode_forces_recompute(monkeypatch):
    _set(monkeypatch, dq_mode="tma_atomic")
    assert triton_launch.dq_mode() == "tma_atomic"
    torch.use_deterministic_algorithms(True)
    try:
        assert triton_launch.dq_mode() == "recompute"
    finally:
        torch.use_deterministic_algorithms(False)
    _set(monkeypatch, dq_mode="fast")
    with pytest.raises(ValueError, match="dq_mode is 'fast'; valid: recompute, atomic"):
        triton_launch.dq_mode()


@pytest.mark.parametrize(
    "case,fused_qkv,tma",
    [(CASES[1], False, False), (CASES[1], True, True), (CASES[5], False, True),
     (CASES[9], True, True), (CASES[9], False, False)],
    ids=["gqa4-pointers", "gqa4-fused-qkv", "sq<skv", "docs-fused-qkv", "docs-pointers"],
)
def test_forward_load_paths_match_reference(case, fused_qkv, tma, monkeypatch):
    """fwd_tma: Q/K/V through 2-D tensor descriptors (batch tails read the next batch's rows), or
    pointer loads; the default (TMA) also runs in every case of the test above."""
    _set(monkeypatch, fwd_tma=tma)
    b, sq, skv, hq, hkv, d, causal, dtype, doc_len = case
    q, k, v, _ = _inputs(b, sq, skv, hq, hkv, d, dtype, seed=sq + 2)
    if fused_qkv:  # q, k, v as head slices of one (B, S, Hq + 2 Hkv, D) projection output
        qkv = torch.cat([q, k, v], dim=2)
        q, k, v = qkv[:, :, :hq], qkv[:, :, hq:hq + hkv], qkv[:, :, hq + hkv:]
    assert all(triton_launch.descriptor(t) is not None for t in (q, k, v))  # fused slices too
    docs = (_docs(b, sq, doc_len, 1),) * 2 if doc_len else (None, None)
    kw = dict(causal=causal, q_doc=docs[0], kv_doc=docs[1])
    out, lse = attention_fwd(q, k, v, backend="triton", **kw)
    ref_out, ref_lse = attention_fwd(q, k, v, backend="reference", **kw)
    atol, rtol = TOL[dtype]
    torch.testing.assert_close(out.float(), ref_out.float(), atol=atol, rtol=rtol)
    live = torch.isfinite(ref_lse)
    assert torch.equal(live, torch.isfinite(lse))
    torch.testing.assert_close(lse[live], ref_lse[live], atol=atol, rtol=rtol)


@pytest.mark.parametrize("split,dq_mode,heads_inner",
                         [(2, "recompute", False), (4, "atomic", True), (2, "tma_atomic", True)])
def test_dkdv_split_over_the_query_head_group(split, dq_mode, heads_inner, monkeypatch):
    """Few KV heads: the group's query heads are spread over `split` programs, then summed."""
    _set(monkeypatch, dkdv_split=split, dq_mode=dq_mode, dkdv_heads_inner=heads_inner)
    q, k, v, do = _inputs(1, 45, 45, 4, 1, 16, torch.float32, seed=21)
    out, lse = attention_fwd(q, k, v, causal=True, backend="reference")
    grads = attention_bwd(do, q, k, v, out, lse, causal=True, backend="triton")
    ref = attention_bwd(do, q, k, v, out, lse, causal=True, backend="reference")
    for got, want in zip(grads, ref):
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


@pytest.mark.parametrize("doc_len", [0, 6])
def test_block_contract_with_global_lse(doc_len):
    """What ring attention does: two key blocks (before the diagonal, unmasked; the diagonal,
    causal), merged by lse, then each block's backward with the merged (global) out and lse."""
    b, s, hq, hkv, d, dtype = 1, 48, 4, 1, 16, torch.float32
    q, k, v, do = _inputs(b, s, s, hq, hkv, d, dtype, seed=11)
    doc = _docs(b, s, doc_len, 2) if doc_len else None
    h = 21  # an odd split: blocks of 21 and 27 keys; queries are the last 27 positions
    qs, dos, qd = q[:, h:], do[:, h:], (doc[:, h:] if doc_len else None)
    blocks = [(slice(0, h), False), (slice(h, s), True)]
    parts = [
        attention_fwd(qs, k[:, sl], v[:, sl], causal=c, q_doc=qd,
                      kv_doc=doc[:, sl] if doc_len else None, backend="triton")
        for sl, c in blocks
    ]
    out, lse = merge_partials(*parts[0], *parts[1])
    full_out, full_lse = attention_fwd(q, k, v, causal=True, q_doc=doc, kv_doc=doc,
                                       backend="reference")
    torch.testing.assert_close(out, full_out[:, h:], atol=1e-4, rtol=1e-4)
    torch.testing.assert_close(lse, full_lse[:, :, h:], atol=1e-4, rtol=1e-4)
    dq, dk, dv = torch.zeros_like(qs), torch.zeros_like(k), torch.zeros_like(v)
    for sl, c in blocks:
        gq, gk, gv = attention_bwd(dos, qs, k[:, sl], v[:, sl], out.to(dtype), lse, causal=c,
                                   q_doc=qd, kv_doc=doc[:, sl] if doc_len else None,
                                   backend="triton")
        dq += gq
        dk[:, sl] += gk
        dv[:, sl] += gv
    do_tail = torch.cat([torch.zeros_like(do[:, :h]), dos], dim=1)  # only the last 27 queries
    ref = attention_bwd(do_tail, q, k, v, full_out, full_lse, causal=True, q_doc=doc, kv_doc=doc,
                        backend="reference")
    for got, want in zip((dq, dk, dv), (ref[0][:, h:], ref[1], ref[2])):
        torch.testing.assert_close(got, want, atol=2e-4, rtol=2e-4)


def _naive(q, k, v, causal, doc):
    """float64 attention with expanded K/V: (out, lse), differentiable."""
    g = q.shape[2] // k.shape[2]
    qd, kd, vd = (t.double().transpose(1, 2) for t in (q, k, v))
    kd, vd = kd.repeat_interleave(g, 1), vd.repeat_interleave(g, 1)
    s = qd @ kd.transpose(-1, -2) / math.sqrt(q.shape[-1])
    n = q.shape[1]
    keep = torch.ones(n, n, dtype=torch.bool)
    if causal:
        keep = torch.tril(keep)
    if doc is not None:
        keep = keep & (doc[:, None, :, None] == doc[:, None, None, :])
    s = s.masked_fill(~keep, float("-inf"))
    return (torch.softmax(s, -1) @ vd).transpose(1, 2), torch.logsumexp(s, -1)


@pytest.mark.parametrize("compiled", [False, True])
def test_autograd_through_out_and_lse(compiled):
    b, s, hq, hkv, d = 1, 37, 4, 2, 16
    q, k, v, do = _inputs(b, s, s, hq, hkv, d, torch.float32, seed=5)
    dl = torch.randn(b, hq, s, generator=torch.Generator().manual_seed(6))
    doc = _docs(b, s, 9, 3)

    def loss_fn(q, k, v):
        out, lse = torch.ops.titankit.flash_attn_fwd(q, k, v, True, doc, doc)
        return (out * do).sum() + (lse * dl).sum() + attention(
            q, k, v, causal=False, backend="triton").square().sum()

    fn = torch.compile(loss_fn, backend="aot_eager", fullgraph=True) if compiled else loss_fn
    leaves = [t.clone().requires_grad_() for t in (q, k, v)]
    fn(*leaves).backward()
    ref_leaves = [t.double().requires_grad_() for t in (q, k, v)]
    o, lse = _naive(*ref_leaves, True, doc)
    o2, _ = _naive(*ref_leaves, False, None)
    ((o * do.double()).sum() + (lse * dl.double()).sum() + o2.square().sum()).backward()
    for leaf, ref in zip(leaves, ref_leaves):
        torch.testing.assert_close(leaf.grad.double(), ref.grad, atol=2e-4, rtol=2e-4)


def test_custom_ops_pass_opcheck():
    q, k, v, do = _inputs(1, 20, 20, 2, 1, 16, torch.float32, seed=8)
    doc = _docs(1, 20, 5, 4)
    out, lse = torch.ops.titankit.flash_attn_fwd(q, k, v, True, doc, doc)
    torch.library.opcheck(torch.ops.titankit.flash_attn_fwd.default, (q, k, v, True, doc, doc),
                          test_utils=("test_schema", "test_faketensor"))
    torch.library.opcheck(torch.ops.titankit.flash_attn_bwd.default,
                          (do, q, k, v, out, lse, True, doc, doc, None),
                          test_utils=("test_schema", "test_faketensor"))


def test_doc_ranges_cover_every_shared_document():
    """The block-skipping table: exact for sorted ids, a superset for any ids."""
    g = torch.Generator().manual_seed(0)
    sorted_doc = _docs(2, 100, 7, 5)
    shuffled = torch.randint(0, 4, (2, 90), generator=g, dtype=torch.int32)
    pairs = [(sorted_doc, sorted_doc), (shuffled, shuffled), (sorted_doc[:, 30:], sorted_doc)]
    for rows, cols in pairs:
        lo, hi = triton_blocks.doc_ranges(rows, cols, 16)
        for bi in range(rows.shape[0]):
            for gi in range(lo.shape[1]):
                chunk = rows[bi, gi * 16:(gi + 1) * 16]
                hits = torch.nonzero(torch.isin(cols[bi], chunk)).flatten()
                if hits.numel() == 0:
                    continue
                assert lo[bi, gi] <= hits.min() and hits.max() < hi[bi, gi]
    lo, hi = triton_blocks.doc_ranges(sorted_doc, sorted_doc, 16)
    # Sorted ids: the range ends at the granule holding the last key of the row's last document.
    last_doc = sorted_doc[0, 15]
    last_key = int(torch.nonzero(sorted_doc[0] == last_doc).max())
    assert int(hi[0, 0]) == min(100, (last_key // 16 + 1) * 16)


def test_unsupported_inputs_raise_value_errors():
    q, k, v, _ = _inputs(1, 8, 8, 2, 1, 48, torch.float32, seed=0)
    with pytest.raises(ValueError, match="head dim 48"):
        attention(q, k, v, backend="triton")
    q, k, v, _ = _inputs(1, 8, 8, 2, 1, 16, torch.float64, seed=0)
    with pytest.raises(ValueError, match="dtype torch.float64"):
        attention(q, k, v, backend="triton")
