"""Triton attention on the GPU in bf16 at training size, against the fp32 reference.

Run on the device machine: `python -m pytest -q -m gpu tests/gpu/test_attention_gpu.py`.
Errors are relative Frobenius norms ||got - ref|| / ||ref|| against the reference computed in fp32
from the same bf16 inputs; bf16 storage of the result alone costs ~1e-3 of that.
"""

from __future__ import annotations

import pytest
import torch

from kernels.attention import attention, attention_bwd, attention_fwd, merge_partials

pytestmark = pytest.mark.gpu

# Autotuning compiles every config of every kernel for each new shape class; to keep this file
# within minutes, tests pin one config per kernel, except the full-size case marked "autotuned".
PINNED = {"fwd": (128, 64, 8, 3), "dkdv": (64, 128, 8, 2), "dq": (128, 64, 8, 2)}


@pytest.fixture(autouse=True)
def pinned_configs(request, monkeypatch):
    from kernels.attention import triton_launch

    if "autotuned" not in request.node.name:
        monkeypatch.setattr(triton_launch.SETTINGS, "config_override", dict(PINNED))
    yield


OUT_TOL = 5e-3  # out and lse
GRAD_TOL = 1e-2  # dq, dk, dv (bf16 P and dS feed the backward matmuls)


def _rel(got: torch.Tensor, want: torch.Tensor) -> float:
    got, want = got.float(), want.float()
    return ((got - want).norm() / want.norm().clamp_min(1e-30)).item()


def _inputs(b, sq, skv, hq, hkv, d, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    make = lambda *s: torch.randn(*s, device="cuda", generator=g).to(torch.bfloat16)  # noqa: E731
    return make(b, sq, hq, d), make(b, skv, hkv, d), make(b, skv, hkv, d), make(b, sq, hq, d)


def _docs(b, s, seed):
    """Random packed documents: mostly short (1..300 tokens) with a few long ones."""
    g = torch.Generator().manual_seed(seed)
    lengths = []
    while sum(lengths) < b * s:
        lengths.append(int(torch.randint(1, 300, (1,), generator=g)) if len(lengths) % 7
                       else int(torch.randint(500, 3000, (1,), generator=g)))
    ids = torch.repeat_interleave(torch.arange(len(lengths)), torch.tensor(lengths))[: b * s]
    return ids.view(b, s).to(torch.int32).cuda()


CASES = [  # b, sq, skv, hq, hkv, d, causal, documents
    pytest.param(1, 8192, 8192, 16, 2, 128, True, False, id="S8192-gqa8-d128-autotuned"),
    pytest.param(2, 3001, 3001, 8, 1, 128, True, False, id="odd3001-gqa8"),
    pytest.param(1, 4097, 4097, 8, 2, 64, True, False, id="odd4097-d64"),
    pytest.param(1, 1024, 4096, 8, 1, 128, True, False, id="sq1024-skv4096-bottom-right"),
    pytest.param(1, 8192, 8192, 16, 2, 128, True, True, id="S8192-documents"),
    pytest.param(1, 2048, 2048, 8, 8, 128, False, False, id="noncausal-mha"),
]


@pytest.mark.parametrize("b,sq,skv,hq,hkv,d,causal,docs", CASES)
def test_triton_matches_fp32_reference(b, sq, skv, hq, hkv, d, causal, docs):
    q, k, v, do = _inputs(b, sq, skv, hq, hkv, d, seed=sq)
    doc = _docs(b, sq, seed=1) if docs else None
    kw = dict(causal=causal, q_doc=doc, kv_doc=doc)
    out, lse = attention_fwd(q, k, v, backend="triton", **kw)
    ref_out, ref_lse = attention_fwd(q, k, v, backend="reference", **kw)
    assert out.dtype == torch.bfloat16 and lse.dtype == torch.float32
    assert _rel(out, ref_out) < OUT_TOL
    live = torch.isfinite(ref_lse)
    assert torch.equal(live, torch.isfinite(lse))
    assert _rel(lse[live], ref_lse[live]) < OUT_TOL
    grads = attention_bwd(do, q, k, v, out, lse, backend="triton", **kw)
    del ref_out
    torch.cuda.empty_cache()
    ref_grads = attention_bwd(do, q, k, v, out, lse, backend="reference", **kw)
    for name, got, want in zip(("dq", "dk", "dv"), grads, ref_grads):
        err = _rel(got, want)
        assert err < GRAD_TOL, f"{name}: relative error {err:.2e}"


def test_ring_block_contract_at_size():
    """Two key blocks of a 2-rank causal ring, merged by lse; block backwards with global lse."""
    b, s, hq, hkv, d = 1, 8192, 8, 1, 128
    q, k, v, do = _inputs(b, s, s, hq, hkv, d, seed=3)
    h = s // 2
    qs, dos = q[:, h:], do[:, h:]
    blocks = [(slice(0, h), False), (slice(h, s), True)]
    parts = [attention_fwd(qs, k[:, sl], v[:, sl], causal=c, backend="triton") for sl, c in blocks]
    out, lse = merge_partials(*parts[0], *parts[1])
    full_out, full_lse = attention_fwd(q, k, v, causal=True, backend="triton")
    assert _rel(out, full_out[:, h:]) < OUT_TOL and _rel(lse, full_lse[:, :, h:]) < 1e-5
    # The merged output stays fp32 (as a ring implementation keeps it); the backward accepts it.
    dq = torch.zeros_like(qs, dtype=torch.float32)
    dk = torch.zeros_like(k, dtype=torch.float32)
    dv = torch.zeros_like(v, dtype=torch.float32)
    for sl, c in blocks:
        gq, gk, gv = attention_bwd(dos, qs, k[:, sl], v[:, sl], out, lse, causal=c,
                                   backend="triton")
        dq += gq
        dk[:, sl] += gk
        dv[:, sl] += gv
    do_tail = torch.cat([torch.zeros_like(do[:, :h]), dos], dim=1)
    ref = attention_bwd(do_tail, q, k, v, full_out, full_lse, causal=True, backend="reference")
    assert _rel(dq, ref[0][:, h:]) < GRAD_TOL
    assert _rel(dk, ref[1]) < GRAD_TOL and _rel(dv, ref[2]) < GRAD_TOL


def test_sdpa_lse_pair_on_cuda_matches_reference():
    """The "sdpa" fwd/bwd pair (aten cuDNN ops, FA2 where cuDNN cannot run) used by context parallelism."""
    q, k, v, do = _inputs(1, 2048, 2048, 16, 2, 128, seed=4)
    out, lse = attention_fwd(q, k, v, causal=True, backend="sdpa")
    ref_out, ref_lse = attention_fwd(q, k, v, causal=True, backend="reference")
    assert _rel(out, ref_out) < OUT_TOL and _rel(lse, ref_lse) < OUT_TOL
    grads = attention_bwd(do, q, k, v, out, lse, causal=True, backend="sdpa")
    ref = attention_bwd(do, q, k, v, out, lse, causal=True, backend="reference")
    for got, want in zip(grads, ref):
        assert _rel(got, want) < GRAD_TOL


def test_torch_compile_matches_eager():
    q, k, v, do = _inputs(2, 2048, 2048, 16, 4, 128, seed=5)
    doc = _docs(2, 2048, seed=2)

    def step(q, k, v):
        out = attention(q, k, v, causal=True, doc_ids=doc, backend="triton")
        return (out.float() * do.float()).sum()

    def grads(fn):
        leaves = [t.detach().clone().requires_grad_() for t in (q, k, v)]
        loss = fn(*leaves)
        loss.backward()
        return [loss] + [t.grad for t in leaves]

    eager = grads(step)
    compiled = grads(torch.compile(step, fullgraph=True))
    for got, want in zip(compiled, eager):
        assert _rel(got, want) < 1e-6  # same kernels, same configs: equal up to reduction order


VARIANTS = {  # name -> triton_launch.SETTINGS fields, each against the defaults
    "pointer-fwd": dict(fwd_tma=False),
    "atomic": dict(dq_mode="atomic", dkdv_heads_inner=True),
    "tma-atomic": dict(dq_mode="tma_atomic", dkdv_heads_inner=True, dkdv_tma=True),
    "tma-atomic-pointers": dict(dq_mode="tma_atomic"),
    "recompute-tma": dict(dkdv_heads_inner=True, dkdv_tma=True, dq_tma=True),
}


@pytest.mark.parametrize("docs", [False, True], ids=["causal", "documents"])
@pytest.mark.parametrize("variant", list(VARIANTS))
def test_variants_match_default(variant, docs, monkeypatch):
    """Every alternative of triton_launch.SETTINGS (TMA loads, atomic and TMA-reduced dQ, loop
    order) against the defaults, in bf16 with batch and sequence tails (B 2, S 4099)."""
    from kernels.attention import triton_launch

    q, k, v, do = _inputs(2, 4099, 4099, 16, 2, 128, seed=6)
    doc = _docs(2, 4099, seed=3) if docs else None
    kw = dict(causal=True, q_doc=doc, kv_doc=doc, backend="triton")
    out, lse = attention_fwd(q, k, v, **kw)
    grads = attention_bwd(do, q, k, v, out, lse, **kw)
    for name, value in VARIANTS[variant].items():
        monkeypatch.setattr(triton_launch.SETTINGS, name, value)
    out2, lse2 = attention_fwd(q, k, v, **kw)
    assert _rel(out2, out) < 1e-3 and _rel(lse2, lse) < 1e-6
    for name, got, want in zip(("dq", "dk", "dv"), attention_bwd(do, q, k, v, out, lse, **kw),
                               grads):
        assert _rel(got, want) < 5e-3, f"{name}: {_rel(got, want):.2e}"
