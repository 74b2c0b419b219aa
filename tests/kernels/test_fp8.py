"""FP8 Triton kernels (kernels/fp8) against reference.py, in Triton's interpreter on CPU.

Triton decides at decoration time whether a kernel is interpreted, and a module once imported stays
as it is; to be independent of what else the pytest process imported (tests/gpu needs the compiled
kernels), all checks run in ONE child process with TRITON_INTERPRET=1 and report back per check.

What the interpreter can and cannot do here (triton 3.9), and so what is tested where:
- fp8 `tl.dot` is right (operands widened to fp16, fp32 accumulation): GEMMs are tested here.
- fp32 -> fp8 casts truncate and lose the mantissa carry, so the quantize kernel rounds to the e4m3
  grid itself (see quantize_e4m3.py); that makes the kernel testable here bit for bit.
- fp8 NaN (0x7F) is decoded as 480 by the interpreter's dot, and bf16 denormals are flushed to zero
  when widened to fp32: NaN propagation through the GEMM and amax of bf16 denormals are checked in
  tests/gpu/test_fp8_gpu.py only.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import traceback
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CHECKS: dict = {}
MARK = "FP8_INTERPRETER_RESULTS "


def check(fn):
    CHECKS[fn.__name__] = fn
    return fn


def _edge_input(dtype):
    """Random (37, 150) rows spanning 1e-8..1e8, plus zero, huge, tiny and non-finite rows."""
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(37, 150, generator=g) * torch.logspace(-8, 8, 37)[:, None]
    x[3] = 0.0  # all-zero row
    x[7] = torch.randn(150, generator=g) * 1e38  # up to ~3e38: near the bf16 / fp32 maximum
    x[7, 5] = 3.3e38
    x[8] = torch.randn(150, generator=g) * 1e-30  # tiny (normal) row
    x[9, :10] = 2.0 ** -10  # ties of the e4m3 grid after scaling
    # Scale exactly 1 (amax 448): tiny values of both signs round to +-0 (e4m3 0x00 / 0x80, as torch
    # casts them), subnormal ties round to even: +-2^-10 -> +-0, +-3 * 2^-10 -> +-2^-8.
    x[11] = torch.randn(150, generator=g) * 1e-5
    x[11, 0] = 448.0
    x[11, 1:5] = torch.tensor([1.0, -1.0, 3.0, -3.0]) * 2.0 ** -10
    x[5, 7] = float("nan")
    x[6, 2] = float("inf")
    x[6, 3] = float("-inf")
    return x.to(dtype)


def _same_bits(a, b) -> bool:
    import torch

    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _roundtrip_bound(x, q, inv):
    """Dequantized finite values within e4m3's half ulp (2^-4 relative) of x, where x * scale is a
    normal e4m3 number (>= 2^-6); an absolute half ulp of the subnormal grid (2^-10) below that."""
    import torch

    xf = x.float()
    deq = q.float() * inv
    scaled = xf / inv  # ~ x * scale
    fin = torch.isfinite(xf)
    normal = fin & (scaled.abs() >= 2.0 ** -6)
    err = (deq - xf).abs()
    assert bool((err[normal] <= 2.0 ** -4 * (1 + 1e-5) * xf.abs()[normal]).all())
    assert bool((err[fin & ~normal] <= (2.0 ** -10) * (1 + 1e-5) * (inv.expand_as(xf)[fin & ~normal])).all())
    assert bool(torch.isnan(q.float()[~fin]).all()), "non-finite inputs must become e4m3 NaN"


@check
def quantize_rowwise_bitexact():
    import torch

    from kernels.fp8 import reference as R
    from kernels.fp8.quantize_e4m3 import fp8_quantize_rowwise

    for dtype in (torch.bfloat16, torch.float32):
        x = _edge_input(dtype)
        q, inv = fp8_quantize_rowwise(x)
        rq, rinv = R.quantize_rowwise(x)
        assert _same_bits(q, rq) and torch.equal(inv, rinv), dtype
        assert bool(torch.isfinite(inv).all()) and bool((inv > 0).all())
        _roundtrip_bound(x, q, inv)


@check
def quantize_colwise_t_bitexact():
    import torch

    from kernels.fp8 import reference as R
    from kernels.fp8.quantize_e4m3 import fp8_quantize_colwise_t

    for dtype in (torch.bfloat16, torch.float32):
        x = _edge_input(dtype).t().contiguous()  # the edge cases become columns
        qt, inv = fp8_quantize_colwise_t(x)
        rqt, rinv = R.quantize_colwise_t(x)
        assert qt.shape == (x.shape[1], x.shape[0]) and inv.shape == (x.shape[1], 1)
        assert _same_bits(qt, rqt) and torch.equal(inv, rinv), dtype
        assert bool(torch.isfinite(inv).all())
        _roundtrip_bound(x.t(), qt, inv)


@check
def quantize_tensorwise_bitexact():
    import torch

    from kernels.fp8 import reference as R
    from kernels.fp8.quantize_e4m3 import fp8_quantize_tensorwise

    g = torch.Generator().manual_seed(1)
    for scale in (1e-30, 1.0, 1e30):
        x = (torch.randn(70, 90, generator=g) * scale).bfloat16()
        q, qt, inv = fp8_quantize_tensorwise(x, None, True, True)
        rq, rinv = R.quantize_tensorwise(x)
        assert _same_bits(q, rq) and _same_bits(qt, rq.t().contiguous()) and torch.equal(inv, rinv)
        _roundtrip_bound(x, q, inv)
    zero = torch.zeros(16, 32)
    q, qt, inv = fp8_quantize_tensorwise(zero, None, False, True)
    assert q.numel() == 0 and qt.shape == (32, 16) and bool(torch.isfinite(inv)) and not bool(qt.float().any())


@check
def amax_and_given_amax():
    """The TP path: amax alone, then quantize with an (all-reduced, here doubled) amax."""
    import torch

    from kernels.fp8 import reference as R
    from kernels.fp8.quantize_e4m3 import (fp8_amax, fp8_quantize_colwise_t, fp8_quantize_rowwise,
                                           fp8_quantize_tensorwise)

    x = _edge_input(torch.float32)
    x[10] = 1e-40  # fp32 denormals (fine in the interpreter; bf16 denormals are not, see above)
    assert torch.equal(fp8_amax(x, "row"), R.finite_amax(x, dim=1))
    assert torch.equal(fp8_amax(x, "col"), R.finite_amax(x, dim=0).t())
    assert torch.equal(fp8_amax(x, "tensor"), R.finite_amax(x))
    y = torch.randn(48, 80, generator=torch.Generator().manual_seed(2)).bfloat16()
    a = R.finite_amax(y, dim=1) * 2
    q, inv = fp8_quantize_rowwise(y, a)
    rq, rinv = R.quantize_with_amax(y, a)
    assert _same_bits(q, rq) and torch.equal(inv, rinv)
    a = R.finite_amax(y, dim=0).t() * 2
    qt, inv = fp8_quantize_colwise_t(y, a)
    rq, rinv = R.quantize_with_amax(y.t(), a)
    assert _same_bits(qt, rq.contiguous()) and torch.equal(inv, rinv)
    a = R.finite_amax(y) * 2
    q, _, inv = fp8_quantize_tensorwise(y, a, True, False)
    rq, rinv = R.quantize_with_amax(y, a)
    assert _same_bits(q, rq) and torch.equal(inv, rinv)


def _gemm_case(M, K, N, rowwise, seed):
    import torch

    from kernels.fp8 import reference as R

    g = torch.Generator().manual_seed(seed)
    x = torch.randn(M, K, generator=g) * torch.rand(M, 1, generator=g) * 4
    w = torch.randn(N, K, generator=g) * 0.05
    quant = R.quantize_rowwise if rowwise else R.quantize_tensorwise
    qa, sa = quant(x)
    qw, sw = quant(w)
    sb = sw.reshape(1, -1) if rowwise else sw
    return qa, qw.t(), sa, sb, R.scaled_mm(qa, qw.t(), sa, sb, torch.float32)


def _assert_gemm_close(out, ref):
    # Same exact e4m3 products, summed in another order in fp32: 1e-5 of the largest |out| covers it.
    err = (out - ref).abs()
    assert bool((err <= 1e-5 * ref.abs().max()).all()), f"max err {err.max():.3g}"


def _truncate_to_bf16(x):
    """The interpreter casts fp32 -> bf16 by truncation (runtime/interpreter.py cast_impl passes no
    rounding mode); the GPU rounds to nearest even, which tests/gpu checks."""
    import torch

    return (x.view(torch.int32) & -65536).view(torch.float32).bfloat16()


def _check_gemm(fn, a, b, sa, sb, ref, fast):
    import torch

    out32 = fn(a, b, sa, sb, torch.float32, fast)
    _assert_gemm_close(out32, ref)
    out16 = fn(a, b, sa, sb, torch.bfloat16, fast)  # the same epilogue, one cast more
    assert torch.equal(out16, _truncate_to_bf16(out32))


@check
def gemm_matches_reference():
    import torch

    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm

    # Odd multiples of 16, so the interpreter config (32x32x32 tiles) has ragged edges everywhere.
    for i, (M, K, N) in enumerate([(80, 112, 144), (48, 208, 16), (7, 48, 96)]):
        for rowwise in (True, False):
            a, b, sa, sb, ref = _gemm_case(M, K, N, rowwise, seed=i)
            for fast in (False, True):
                _check_gemm(fp8_gemm, a, b, sa, sb, ref, fast)


@check
def gemm_persistent_configs():
    """The GPU-style configs' code paths: split epilogue, grouped order, several tiles per program."""
    import functools

    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm_launch

    a, b, sa, sb, ref = _gemm_case(272, 256, 320, rowwise=True, seed=7)
    for cfg in (dict(BLOCK_M=64, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, EPILOGUE_SPLIT=True, NUM_SMS=3),
                dict(BLOCK_M=128, BLOCK_N=64, BLOCK_K=64, GROUP_M=2, EPILOGUE_SPLIT=False, NUM_SMS=5,
                     num_warps=4, num_stages=2),
                dict(BLOCK_M=64, BLOCK_N=64, BLOCK_K=256, GROUP_M=8, EPILOGUE_SPLIT=True, NUM_SMS=4)):
        _check_gemm(functools.partial(fp8_gemm_launch, config=cfg), a, b, sa, sb, ref, False)


@check
def gemm_plan_reused_after_first_call():
    """The host path (gemm_fp8_sm90.py "Host path"): the first call of a shape builds a plan (on GPU:
    the only autotuner run), later calls reuse it, every call is right, a new shape or output dtype
    gets its own plan, and degenerate shapes need none."""
    import torch

    from kernels.fp8 import gemm_fp8_sm90 as G

    G.clear_plans()
    stats = G.launch_stats
    built, planned = stats["plans_built"], stats["planned_launches"]
    a, b, sa, sb, ref = _gemm_case(80, 112, 144, rowwise=True, seed=11)
    for _ in range(3):
        _assert_gemm_close(G.fp8_gemm_launch(a, b, sa, sb, torch.float32, False), ref)
    assert stats["plans_built"] == built + 1 and stats["planned_launches"] == planned + 2, stats
    assert len(G._PLANS) == 1
    (plan,) = G._PLANS.values()
    assert all(d.base is None for d in plan.descs), "a plan must not keep the first call's tensors alive"
    G.fp8_gemm_launch(a, b, sa, sb, torch.bfloat16, False)  # another output dtype: another kernel
    a2, b2, sa2, sb2, ref2 = _gemm_case(48, 64, 32, rowwise=False, seed=12)
    for _ in range(2):
        _assert_gemm_close(G.fp8_gemm_launch(a2, b2, sa2, sb2, torch.float32, True), ref2)
    assert stats["plans_built"] == built + 3 and len(G._PLANS) == 3, stats
    # M = 0 and K = 0 are valid products (empty, and all zeros) that launch nothing.
    empty = G.fp8_gemm_launch(a[:0], b, sa[:0], sb, torch.float32, False)
    assert empty.shape == (0, 144)
    zeros = G.fp8_gemm_launch(a[:, :0], b[:0], sa, sb, torch.float32, False)
    assert zeros.shape == (80, 144) and not bool(zeros.any())
    assert stats["plans_built"] == built + 3


@check
def gemm_rejects_bad_arguments():
    import torch

    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm

    a, b, sa, sb, _ = _gemm_case(32, 64, 48, rowwise=True, seed=3)
    bad = [
        (a, b.contiguous(), sa, sb),  # b row-major
        (a.float(), b, sa, sb),  # not fp8
        (a, b, sa.reshape(1, -1), sb),  # wrong scale shape
        (a[:, :40].contiguous(), b[:40], sa, sb),  # K not a multiple of 16
        # a at an odd byte offset: TMA needs 16-byte aligned bases (a ValueError, not triton's assert)
        (torch.empty(a.numel() + 1, dtype=a.dtype)[1:].view(a.shape).copy_(a), b, sa, sb),
    ]
    for args in bad:
        try:
            fp8_gemm(*args)
        except ValueError:
            continue
        raise AssertionError("expected ValueError")


@check
def custom_ops_opcheck():
    """Schemas, fake (meta) implementations and torch.compile dispatch of the registered ops."""
    import torch

    from kernels.fp8 import gemm_fp8_sm90, quantize_e4m3  # noqa: F401 (registers the ops)

    x = torch.randn(48, 64, generator=torch.Generator().manual_seed(4)).bfloat16()
    ops = torch.ops.titankit
    torch.library.opcheck(ops.fp8_quantize_rowwise, (x, None))
    torch.library.opcheck(ops.fp8_quantize_colwise_t, (x, None))
    torch.library.opcheck(ops.fp8_quantize_tensorwise, (x, None, True, True))
    torch.library.opcheck(ops.fp8_amax, (x, "col"))
    a, b, sa, sb, _ = _gemm_case(32, 64, 48, rowwise=True, seed=5)
    # test_schema compares inputs with arithmetic that CPU float8 tensors do not implement.
    torch.library.opcheck(ops.fp8_gemm, (a, b, sa, sb, torch.bfloat16, False),
                          test_utils=("test_faketensor", "test_aot_dispatch_dynamic"))


@check
def float8_linear_triton_matches_emulation():
    """trainer/float8.py with backend 'triton' (these kernels) vs 'torch' (eager emulation)."""
    import torch
    from torch import nn

    from trainer.float8 import Float8Linear

    for recipe in ("tensorwise", "rowwise"):
        torch.manual_seed(0)
        lin = nn.Linear(64, 48)
        x = torch.randn(2, 16, 64)
        g = torch.randn(2, 16, 48)
        grads = []
        for backend in ("torch", "triton"):
            layer = Float8Linear.from_linear(lin, recipe, backend)
            xi = x.clone().requires_grad_()
            out = layer(xi)
            out.backward(g)
            grads.append((out.detach(), xi.grad, lin.weight.grad.clone()))
            lin.weight.grad = None
        for e, t in zip(*grads):
            torch.testing.assert_close(t, e, rtol=1e-5, atol=1e-5 * e.abs().max().item())


@check
def float8_linear_triton_compiles():
    """Under torch.compile (fullgraph) the custom ops are traced, in eager their plain functions run
    (kernels/fp8/__init__.py `_pick`): both give the same bits, forward and backward."""
    import torch
    from torch import nn

    from trainer.float8 import Float8Linear

    for recipe in ("tensorwise", "rowwise"):
        torch.manual_seed(1)
        lin = nn.Linear(64, 48)
        layer = Float8Linear.from_linear(lin, recipe, "triton")
        x, g = torch.randn(2, 16, 64), torch.randn(2, 16, 48)
        results = []
        for compiled in (False, True):
            torch._dynamo.reset()
            fn = torch.compile(layer, backend="aot_eager", fullgraph=True) if compiled else layer
            xi = x.clone().requires_grad_()
            out = fn(xi)
            out.backward(g)
            results.append((out.detach(), xi.grad, lin.weight.grad.clone()))
            lin.weight.grad = lin.bias.grad = None
        for name, eager, compiled in zip(("out", "grad_input", "grad_weight"), *results):
            assert torch.equal(eager, compiled), f"{recipe} {name}"


@check
def eager_selective_ac_does_not_rerun_triton_gemms():
    """Eager Float8Linear (backend "triton") in a 2-block model under per-op selective AC: backward
    launches only the 28 gradient GEMMs (dgrad and wgrad of 7 linears x 2 blocks), as without AC.
    In eager the GEMM skips the custom-op dispatch for host time, which also hid it from the AC
    policy, so each block's backward re-ran its forward GEMMs; under a dispatch mode (AC's) the op
    is used."""
    from types import SimpleNamespace

    import torch

    import kernels.fp8.gemm_fp8_sm90 as G
    import trainer.float8 as f8
    from trainer.models import FAMILIES
    from trainer.parallel.checkpointing import apply_ac

    launches = [0]
    real = G.fp8_gemm_launch

    def counting(*args, **kwargs):
        launches[0] += 1
        return real(*args, **kwargs)

    G.fp8_gemm_launch = counting
    try:
        fam = FAMILIES["llama3"]
        args = fam.make_args("debug", {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                       "vocab_size": 128})
        tokens = torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(1))
        counts, grads = {}, {}
        for mode in ("none", "selective"):
            torch.manual_seed(0)
            model = fam.model_cls(args)
            model.init_weights()
            f8.convert_to_float8_training(model, SimpleNamespace(
                enable=True, recipe="tensorwise", backend="triton", grad_weight_high_precision=False,
                filter_fqns=["output"]))
            if mode != "none":
                apply_ac(model, SimpleNamespace(mode=mode, selective_ac_option="op"))
            loss = model(tokens).float().sum()
            launches[0] = 0
            loss.backward()
            counts[mode] = launches[0]
            grads[mode] = [p.grad for p in model.parameters()]
    finally:
        G.fp8_gemm_launch = real
    assert counts == {"none": 28, "selective": 28}, counts
    for a, b in zip(grads["none"], grads["selective"]):
        assert torch.equal(a, b)


def _run_checks() -> dict:
    results = {}
    for name, fn in CHECKS.items():
        try:
            fn()
            results[name] = "ok"
        except Exception:  # report every failing check, not only the first
            results[name] = traceback.format_exc()
    return results


@pytest.fixture(scope="module")
def interpreter_results():
    pytest.importorskip("triton")
    env = dict(os.environ, TRITON_INTERPRET="1", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(MARK)]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return json.loads(lines[-1][len(MARK):])


@pytest.mark.parametrize("name", list(CHECKS))
def test_fp8_kernel_in_interpreter(name, interpreter_results):
    assert interpreter_results[name] == "ok", interpreter_results[name]


def test_bench_says_why_the_thunderkittens_column_is_absent(monkeypatch, tmp_path):
    """`python -m kernels.bench fp8_gemm` adds the ThunderKittens columns only when the extension can
    be built; otherwise it prints one line with the reason (no GPU is needed to get the reason)."""
    from kernels.thunderkittens.build import unavailable_reason

    monkeypatch.delenv("THUNDERKITTENS_ROOT", raising=False)
    assert unavailable_reason() == "THUNDERKITTENS_ROOT is not set"
    monkeypatch.setenv("THUNDERKITTENS_ROOT", str(tmp_path))  # not a ThunderKittens clone
    reason = unavailable_reason()
    assert reason is not None and "include/kittens.cuh" in reason and "\n" not in reason


SMEM_MARK = "FP8_SM90_SHARED "


def _sm90_shared_bytes() -> list:
    """Compile every autotune config for sm_90 (no GPU needed: triton's own ptxas) in both output
    dtypes; Triton's count of the shared memory each one allocates. Each config is compiled once per
    dtype, in fast accumulation if it is a FAST config (promotion adds registers, not shared memory:
    the 128x128 configs of both lists allocate the same bytes in both modes)."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource

    from kernels.fp8.gemm_fp8_sm90 import CONFIGS, FAST_CONFIGS, _fp8_gemm_kernel

    names = _fp8_gemm_kernel.arg_names
    rows = []
    for c in CONFIGS:
        fast = c in FAST_CONFIGS
        k = c.kwargs
        bm, bn, bk, split = k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], k["EPILOGUE_SPLIT"]
        for out in ("bf16", "fp32"):
            sig = {"a_desc": f"tensordesc<fp8e4nv[{bm}, {bk}]>", "b_desc": f"tensordesc<fp8e4nv[{bn}, {bk}]>",
                   "c_desc": f"tensordesc<{out}[{bm}, {bn // 2 if split else bn}]>",
                   "scale_a_ptr": "*fp32", "scale_b_ptr": "*fp32", "M": "i32", "N": "i32", "K": "i32"}
            consts = dict(ROWWISE=True, FAST_ACCUM=fast, OUT_BF16=out == "bf16", NUM_SMS=132, **k)
            sig.update({n: "constexpr" for n in consts})
            src = ASTSource(_fp8_gemm_kernel, sig, constexprs={(names.index(n),): v for n, v in consts.items()})
            kernel = triton.compile(src, target=GPUTarget("cuda", 90, 32),
                                    options=dict(num_warps=c.num_warps, num_stages=c.num_stages))
            rows.append(dict(fast=fast, out=out, kwargs=k, num_warps=c.num_warps,
                             num_stages=c.num_stages, shared=int(kernel.metadata.shared)))
    return rows


def test_gemm_shared_memory_model_matches_triton():
    """smem_bytes (which prunes the autotune configs per output dtype) against what Triton really
    allocates on sm_90: never below it (a config it keeps would fail with OutOfResources, the H200
    failure of test_every_autotune_config_is_correct with fp32 output), at most the 2 KiB barrier
    slack above it (so no config that fits is dropped), and each mode keeps configs in both dtypes."""
    pytest.importorskip("triton")
    import torch

    env = dict(os.environ, TRITON_INTERPRET="0", PYTHONPATH=str(ROOT))
    proc = subprocess.run([sys.executable, __file__, "--sm90-shared"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=900)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith(SMEM_MARK)]
    assert proc.returncode == 0 and lines, f"child failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    rows = json.loads(lines[-1][len(SMEM_MARK):])

    import triton

    from kernels.fp8.gemm_fp8_sm90 import _SMEM_SLACK, SM90_SMEM_BYTES, configs_for, smem_bytes

    for r in rows:
        cfg = triton.Config(r["kwargs"], num_warps=r["num_warps"], num_stages=r["num_stages"])
        out_dtype = torch.bfloat16 if r["out"] == "bf16" else torch.float32
        model = smem_bytes(cfg, out_dtype)
        assert r["shared"] <= model <= r["shared"] + _SMEM_SLACK, (r, model)
        assert (r["shared"] <= SM90_SMEM_BYTES) == (model <= SM90_SMEM_BYTES), (r, model)
    for fast in (True, False):
        for out_dtype in (torch.bfloat16, torch.float32):
            assert configs_for(fast, out_dtype), (fast, out_dtype)


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    if sys.argv[1:] == ["--sm90-shared"]:
        print(SMEM_MARK + json.dumps(_sm90_shared_bytes()), flush=True)
        sys.exit(0)
    if os.environ.get("TRITON_INTERPRET") != "1":
        sys.exit("run with TRITON_INTERPRET=1 (pytest does this for you)")
    print(MARK + json.dumps(_run_checks()), flush=True)
