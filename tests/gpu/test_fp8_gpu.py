"""FP8 on the GPU (sm_90+): Triton quantize/GEMM vs reference at full size, and the torch backend
(torch._scaled_mm) vs its CPU emulation. Kernel modules are imported inside the tests so that
collecting this file on CPU never decorates Triton kernels (tests/kernels runs them interpreted)."""

from __future__ import annotations

import os
import time

import pytest
import torch
from torch import nn

from kernels.fp8 import reference as R

pytestmark = pytest.mark.gpu


@pytest.fixture(autouse=True)
def _hopper():
    if not torch.cuda.is_available() or torch.cuda.get_device_capability() < (9, 0):
        pytest.skip("needs an sm_90+ GPU")
    if os.environ.get("TRITON_INTERPRET") == "1":
        pytest.skip("TRITON_INTERPRET=1 is set; run tests/gpu in a pytest process of its own")


def _same_bits(a, b) -> bool:
    return a.shape == b.shape and torch.equal(a.view(torch.uint8), b.view(torch.uint8))


def _edge(M: int, K: int, dtype=torch.bfloat16) -> torch.Tensor:
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(M, K, device="cuda", generator=g) * torch.logspace(-6, 6, M, device="cuda")[:, None]
    x[1] = 0.0
    x[2] *= 1e32
    x[3] = 1e-39  # bf16 denormals
    x[4, 5] = float("nan")
    x[5, 6] = float("inf")
    return x.to(dtype)


@pytest.mark.parametrize("M,K", [(8192, 4096), (4096, 14336), (1000, 1040)])
def test_quantize_kernels_bitexact(M, K):
    from kernels.fp8.quantize_e4m3 import (fp8_amax, fp8_quantize_colwise_t, fp8_quantize_rowwise,
                                           fp8_quantize_tensorwise)

    x = _edge(M, K)
    q, inv = fp8_quantize_rowwise(x)
    rq, rinv = R.quantize_rowwise(x)
    assert _same_bits(q, rq) and torch.equal(inv, rinv)
    qt, inv = fp8_quantize_colwise_t(x)
    rq, rinv = R.quantize_colwise_t(x)
    assert _same_bits(qt, rq) and torch.equal(inv, rinv)
    q, qt, inv = fp8_quantize_tensorwise(x, None, True, True)
    rq, rinv = R.quantize_tensorwise(x)
    assert _same_bits(q, rq) and _same_bits(qt, rq.t().contiguous()) and torch.equal(inv, rinv)
    # Compared above the AMAX_EPS clamp: whether the GPU keeps bf16 denormals in amax changes nothing.
    assert torch.equal(fp8_amax(x, "row").clamp(min=R.AMAX_EPS), R.finite_amax(x, dim=1).clamp(min=R.AMAX_EPS))
    assert bool(torch.isfinite(inv).all())


def _operands(M, K, N, rowwise, seed=0):
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(M, K, device="cuda", generator=g).bfloat16()
    w = (torch.randn(N, K, device="cuda", generator=g) * 0.02).bfloat16()
    quant = R.quantize_rowwise if rowwise else R.quantize_tensorwise
    qa, sa = quant(x)
    qw, sw = quant(w)
    return qa, qw.t(), sa, (sw.reshape(1, -1) if rowwise else sw)


# Hopper's FP8 tensor cores accumulate in a reduced format (e8m13: 13 fraction bits, truncated; Khattak
# and Mikaitis, arXiv 2512.07004; DeepSeek-V3 sec. 3.3.2 measures "around 14 bits"). Each MMA step
# (at most 32 products of K) can thus lose 2^-13 of the partial sum's magnitude, which is bounded by
# S = sum_k |a_ik b_kj|. With fp32 promotion every 128 of K there are at most 128 / 16 = 8 such steps
# per promoted chunk, so |out - ref| <= 8 * 2^-13 * S = 2^-10 * S (plus fp32 rounding); without
# promotion the steps add up over all of K: <= (K / 16) * 2^-13 * S.
PROMO_BOUND = 2.0 ** -10


def _abs_sum(a, b, sa, sb) -> torch.Tensor:
    """S = |A| @ |B| in fp32 (dequantized operands), the scale of every accumulation error."""
    return R.dequantize(a, sa).abs() @ R.dequantize(b, sb).abs()


@pytest.mark.parametrize("rowwise", [True, False])
@pytest.mark.parametrize("M,K,N", [(8192, 8192, 8192), (8192, 4096, 1024), (1040, 4096, 14336), (272, 208, 144)])
def test_triton_gemm_matches_reference(rowwise, M, K, N):
    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm

    a, b, sa, sb = _operands(M, K, N, rowwise)
    ref = R.scaled_mm(a, b, sa, sb, torch.float32)
    S = _abs_sum(a, b, sa, sb)
    tiny = 1e-6 * ref.abs().max()  # fp32 rounding of the reference's own sums and of the epilogue
    out32 = fp8_gemm(a, b, sa, sb, torch.float32, False)  # fp32 promotion every 128 of K
    err = (out32 - ref).abs()
    worst = (err / (S + tiny)).max().item()
    assert bool((err <= PROMO_BOUND * S + tiny).all()), f"promoted: max err / S = {worst:.2e} > 2^-10"
    fast = fp8_gemm(a, b, sa, sb, torch.float32, True)  # Hopper's reduced-precision accumulation
    ferr = (fast - ref).abs()
    assert bool((ferr <= (K / 16) * 2.0 ** -13 * S + tiny).all()), "fast accumulation beyond its bound"
    # Promotion must pay where there is something to promote (K >= 4096: 32+ chunks): its error is
    # at most half the fast path's (or at fp32-noise level, if this GPU accumulates more precisely).
    if K >= 4096:
        e_promo, e_fast = err.norm().item(), ferr.norm().item()
        assert e_promo <= max(0.5 * e_fast, 1e-5 * ref.norm().item()), (e_promo, e_fast)


@pytest.mark.parametrize("rowwise", [True, False])
def test_triton_gemm_bf16_output_is_rounded_fp32(rowwise):
    """The bf16 epilogue is the fp32 result rounded to nearest even: bitwise, with one fixed config
    (the autotuner may pick different tiles for the two output dtypes)."""
    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm_launch

    a, b, sa, sb = _operands(1040, 4096, 2048, rowwise, seed=2)
    cfg = dict(BLOCK_M=128, BLOCK_N=128, BLOCK_K=128, GROUP_M=8, EPILOGUE_SPLIT=True, NUM_SMS=0,
               num_warps=8, num_stages=5)  # in both config lists: compiled once for the autotuner too
    for fast in (False, True):
        out32 = fp8_gemm_launch(a, b, sa, sb, torch.float32, fast, config=cfg)
        out16 = fp8_gemm_launch(a, b, sa, sb, torch.bfloat16, fast, config=cfg)
        assert torch.equal(out16, out32.bfloat16()), f"fast={fast}"


def test_every_autotune_config_is_correct():
    """The autotuner may pick any config that fits in shared memory for some shape: each one, in its
    accumulation mode and both output dtypes, on a shape with ragged M and N tile edges (multiples of
    16, so that the kernels compiled here are the ones the autotuner uses), within the bounds above;
    and every promoting config really promotes (BLOCK_K 256 promotes inside one tl.dot): at most
    half the fast path's error. Configs that do not fit are never tried: the autotuner prunes them
    with configs_for (the first H200 run of this test launched 128x256 with fp32 output, 257 KiB)."""
    from kernels.fp8.gemm_fp8_sm90 import _smem_limit, configs_for, fp8_gemm_launch

    K = 4096
    a, b, sa, sb = _operands(1008, K, 720, True, seed=3)
    ref = R.scaled_mm(a, b, sa, sb, torch.float32)
    S = _abs_sum(a, b, sa, sb)
    tiny = 1e-6 * ref.abs().max()
    limit = _smem_limit(torch.cuda.current_device())
    fast_err = None
    for fast in (True, False):
        bound = ((K / 16) if fast else 8) * 2.0 ** -13 * S + tiny
        for out_dtype in (torch.float32, torch.bfloat16):
            configs = configs_for(fast, out_dtype, limit)
            assert configs, f"no config fits: fast={fast} {out_dtype}"
            for c in configs:
                cfg = dict(c.kwargs, NUM_SMS=0, num_warps=c.num_warps, num_stages=c.num_stages)
                out = fp8_gemm_launch(a, b, sa, sb, out_dtype, fast, config=cfg).float()
                err = (out - ref).abs()
                if out_dtype == torch.bfloat16:
                    # Rounded to nearest from the fp32 result: bf16's unit roundoff is 2^-8 (8
                    # significant bits), of |out32| <= |ref| + bound.
                    assert bool((err <= bound * (1 + 2.0 ** -8) + 2.0 ** -8 * ref.abs()).all()), f"fast={fast} bf16 {c}"
                    continue
                assert bool((err <= bound).all()), f"fast={fast} fp32 {c}"
                if fast:
                    fast_err = err.norm().item() if fast_err is None else min(fast_err, err.norm().item())
                else:
                    e = err.norm().item()
                    assert e <= max(0.5 * fast_err, 1e-5 * ref.norm().item()), f"{c}: {e:.3g} vs fast {fast_err:.3g}"


def test_planned_launch_reuses_the_tuned_kernel():
    """Host path: the first call of a shape autotunes and records a plan; the second call must not
    enter the autotuner (a spy counts its runs) and must give the same bits (same kernel, config)."""
    from kernels.fp8 import gemm_fp8_sm90 as G

    a, b, sa, sb = _operands(2064, 1024, 512, True, seed=5)
    G.clear_plans()
    tuner_runs = []
    run = G._fp8_gemm_tuned.run

    def counting_run(*args, **kwargs):
        tuner_runs.append(1)
        return run(*args, **kwargs)

    G._fp8_gemm_tuned.run = counting_run
    try:
        built = G.launch_stats["plans_built"]
        first = G.fp8_gemm_launch(a, b, sa, sb, torch.bfloat16, True)
        second = G.fp8_gemm_launch(a, b, sa, sb, torch.bfloat16, True)
        third = G.fp8_gemm_launch(a, b, sa, sb, torch.bfloat16, True)
    finally:
        del G._fp8_gemm_tuned.run  # the class's method again
    assert len(tuner_runs) == 1 and G.launch_stats["plans_built"] == built + 1
    assert torch.equal(first, second) and torch.equal(first, third)
    ref = R.scaled_mm(a, b, sa, sb, torch.float32)
    assert bool(((second.float() - ref).abs() <= (1024 / 16) * 2.0 ** -13 * _abs_sum(a, b, sa, sb)
                 + 2.0 ** -8 * ref.abs() + 1e-6 * ref.abs().max()).all())


def _host_us(fn, calls: int = 200) -> float:
    """Median host time per call (us) over 5 batches, while the GPU spins: launches only queue."""
    fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        torch.cuda._sleep(200_000_000)  # ~0.1 s of GPU time ahead of the batch
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
        torch.cuda.synchronize()
    return sorted(times)[2]


@pytest.mark.xfail(strict=False, reason="target not met yet: 54.9 us per call vs torch._scaled_mm's "
                   "32.5 us on 2 x H200, 2026-11-30 (docs/benchmarks.md section 7); kept as the goal")
def test_host_time_per_call():
    """Host time of one eager Triton GEMM call (what Float8Linear pays per GEMM) at the 8B wk/wv
    shape: the target is < 30 us (round 2 measured 90.7 us, torch._scaled_mm 21.9 us)."""
    from kernels import fp8

    a, b, sa, sb = _operands(8192, 4096, 1024, True, seed=6)
    ours = _host_us(lambda: fp8.scaled_mm(a, b, sa, sb, torch.bfloat16, True, "triton"))
    cublas = _host_us(lambda: torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=True))
    print(f"host us per call: triton {ours:.1f}, torch._scaled_mm {cublas:.1f}")
    assert ours < 30.0, f"triton {ours:.1f} us per call (torch._scaled_mm {cublas:.1f} us)"


@pytest.mark.parametrize("rowwise", [True, False])
def test_triton_gemm_close_to_scaled_mm(rowwise):
    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm

    a, b, sa, sb = _operands(4096, 4096, 4096, rowwise, seed=1)
    ours = fp8_gemm(a, b, sa, sb, torch.bfloat16, False).float()
    cublas = torch._scaled_mm(a, b, sa, sb, out_dtype=torch.bfloat16, use_fast_accum=False).float()
    assert (ours - cublas).abs().max() / cublas.abs().max() < 1e-2  # 2 bf16 ulps of the largest value


def test_gemm_propagates_nan():
    from kernels.fp8.gemm_fp8_sm90 import fp8_gemm
    from kernels.fp8.quantize_e4m3 import fp8_quantize_rowwise

    x = torch.randn(256, 512, device="cuda")
    x[7, 3] = float("nan")
    qa, sa = fp8_quantize_rowwise(x)
    qw, sw = fp8_quantize_rowwise(torch.randn(128, 512, device="cuda"))
    out = fp8_gemm(qa, qw.t(), sa, sw.reshape(1, -1))
    assert bool(torch.isnan(out[7]).all()) and bool(torch.isfinite(out[torch.arange(256, device="cuda") != 7]).all())


@pytest.mark.parametrize("recipe", ["tensorwise", "rowwise"])
@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_float8_linear_matches_emulation(recipe, backend):
    """The same layer with real FP8 GEMMs (cuBLAS or Triton) and with the fp32 emulation."""
    from trainer.float8 import Float8Linear

    torch.manual_seed(0)
    lin = nn.Linear(4096, 1024, device="cuda", dtype=torch.bfloat16)
    x = torch.randn(4, 512, 4096, device="cuda", dtype=torch.bfloat16)
    g = torch.randn(4, 512, 1024, device="cuda", dtype=torch.bfloat16)
    results = []
    for emulate in (True, False):
        layer = Float8Linear.from_linear(lin, recipe, backend)
        if emulate:
            layer._cuda_gemm, layer._qbackend = "emulated", "reference"
        xi = x.clone().requires_grad_()
        out = layer(xi)
        out.backward(g)
        results.append((out.float(), xi.grad.float(), lin.weight.grad.float()))
        lin.weight.grad = lin.bias.grad = None
    # Same quantization on both sides; the real GEMMs add bf16 output rounding (<= 2^-8 relative:
    # 8 significant bits), and the forward's fast accumulation (K = 4096 in Hopper's 13-bit accumulator, see
    # PROMO_BOUND above) a bias estimated at ~0.5% of the norm; the backward GEMMs are promoted.
    errs = {name: ((real - emu).norm() / emu.norm()).item()
            for name, real, emu in zip(("out", "grad_input", "grad_weight"), results[1], results[0])}
    assert max(errs.values()) < 1e-2, errs


def _exactly_quantizable(rows: int, cols: int, seed: int, scale: float) -> torch.Tensor:
    """bf16 (rows, cols) whose rowwise AND columnwise e4m3 quantizations are lossless: e4m3 values
    times `scale` (a power of two), with +-448 * scale in every row and every column. Each scaling
    group's amax is then 448 * scale, its scale 1 / scale is a power of two, and x * scale is an
    e4m3 value even if the division is off by an ulp or two (inductor computes 448 / amax with
    Triton's approximate division, div.full.f32, unless TORCHINDUCTOR_EMULATE_DIVISION_ROUNDING=1;
    the eager path and our Triton kernels divide exactly)."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    v = (torch.randn(rows, cols, device="cuda", generator=g) * 48).clamp(-448, 448).to(R.E4M3).float()
    i = torch.arange(max(rows, cols), device="cuda")
    sign = torch.randint(0, 2, (i.numel(),), device="cuda", generator=g) * 2.0 - 1.0
    v[i % rows, i % cols] = 448.0 * sign
    return (v * scale).bfloat16()


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_float8_linear_compiles(backend):
    """Float8Linear under torch.compile (fullgraph, inductor) computes the fp8 recipe as eager does,
    forward and backward. What may legitimately differ between the two: inductor may pick another
    GEMM kernel (its own Triton scaled-mm template next to cuBLAS, even without max-autotune:
    torch/_inductor/kernel/mm.py tuned_scaled_mm), and its fused quantization divides
    approximately. So both runs are checked against the exact product, on inputs whose quantization
    is lossless under either division (_exactly_quantizable), within the accumulation bounds above:
    forward fast accumulation (K / 16) 2^-13 S, backward the same bound over its contraction
    length (cuBLAS's promotion interval is not documented, so no tighter one is claimed here), plus
    bf16's unit roundoff 2^-8 of each rounding to bf16 (the GEMM output, then + bias)."""
    from trainer.float8 import Float8Linear

    M, K, N = 2048, 1024, 2048
    lin = nn.Linear(K, N, device="cuda", dtype=torch.bfloat16)
    with torch.no_grad():
        lin.weight.copy_(_exactly_quantizable(N, K, seed=1, scale=2.0 ** -12))
    x0 = _exactly_quantizable(M, K, seed=2, scale=2.0 ** -6).reshape(8, M // 8, K)
    g = _exactly_quantizable(M, N, seed=3, scale=2.0 ** -9).reshape(8, M // 8, N)
    xf, wf, gf = x0.reshape(M, K).float(), lin.weight.float(), g.reshape(M, N).float()
    mm = xf @ wf.t()
    refs = {"out": mm + lin.bias.float(), "grad_input": gf @ wf, "grad_weight": gf.t() @ xf}
    sums = {"out": xf.abs() @ wf.abs().t(), "grad_input": gf.abs() @ wf.abs(), "grad_weight": gf.abs().t() @ xf.abs()}
    lengths = {"out": K, "grad_input": N, "grad_weight": M}
    layer = Float8Linear.from_linear(lin, "rowwise", backend)
    for mode in ("eager", "compiled"):
        torch._dynamo.reset()
        fn = torch.compile(layer, fullgraph=True) if mode == "compiled" else layer
        x = x0.clone().requires_grad_()
        out = fn(x)
        out.backward(g)
        got = {"out": out.reshape(M, N), "grad_input": x.grad.reshape(M, K), "grad_weight": lin.weight.grad}
        lin.weight.grad = lin.bias.grad = None
        for name, ref in refs.items():
            rounding = 2.0 ** -8 * (ref.abs() + (mm.abs() if name == "out" else 0))
            tol = (lengths[name] / 16) * 2.0 ** -13 * sums[name] * (1 + 2.0 ** -7) + rounding + 1e-6 * ref.abs().max()
            err = (got[name].float() - ref).abs()
            worst = (err / tol).max().item()
            assert bool((err <= tol).all()), f"{mode} {backend} {name}: max err / tol = {worst:.2f}"


def _compiled_2_block_model(fp8: bool, ac_mode: str, backend: str = "torch"):
    """A compiled 2-block bf16 model (FP8 linears with `backend` if fp8) under AC `ac_mode`, after
    one forward and backward (which compile it); and its input tokens."""
    from types import SimpleNamespace

    import trainer.float8 as f8
    from trainer.models import FAMILIES
    from trainer.parallel.checkpointing import apply_ac
    from trainer.parallel.compile import apply_compile

    torch._dynamo.reset()
    fam = FAMILIES["llama3"]
    args = fam.make_args("debug", {"dim": 2048, "n_layers": 2, "n_heads": 16, "n_kv_heads": 4,
                                   "vocab_size": 1024, "multiple_of": 1024, "max_seq_len": 4096})
    torch.manual_seed(0)
    with torch.device("cuda"):
        model = fam.model_cls(args)
    model.init_weights()
    model.to(torch.bfloat16)
    if fp8:
        f8.convert_to_float8_training(model, SimpleNamespace(
            enable=True, recipe="tensorwise", backend=backend, grad_weight_high_precision=False,
            filter_fqns=["output"]))
    if ac_mode != "none":
        apply_ac(model, SimpleNamespace(mode=ac_mode, selective_ac_option="op"), compiled=True)
    apply_compile(model)
    tokens = torch.randint(0, 1024, (1, 4096), device="cuda")
    model(tokens).float().sum().backward()  # compiles
    model.zero_grad(set_to_none=True)
    return model, tokens


def _activation_bytes_after_forward(fp8: bool, ac_mode: str) -> int:
    """Memory a compiled 2-block model still holds after its forward (what backward will read)."""
    model, tokens = _compiled_2_block_model(fp8, ac_mode)
    torch.cuda.synchronize()
    before = torch.cuda.memory_allocated()
    out = model(tokens)
    held = torch.cuda.memory_allocated() - before
    out.float().sum().backward()
    return held


def test_full_ac_with_fp8_keeps_no_gemm_outputs_when_compiled():
    """Full AC must free an FP8 block's activations like a bf16 one's. On torch 2.11 plain
    checkpoint kept every FP8 GEMM output of a compiled block (pytorch#177396): 4.6x the memory of
    bf16 full AC in a one-off probe with 4096-wide blocks."""
    bf16_full = _activation_bytes_after_forward(False, "full")
    fp8_full = _activation_bytes_after_forward(True, "full")
    fp8_none = _activation_bytes_after_forward(True, "none")
    mib = 2**20
    msg = f"after forward: bf16 full AC {bf16_full / mib:.0f} MiB, fp8 full AC {fp8_full / mib:.0f} MiB, fp8 no AC {fp8_none / mib:.0f} MiB"
    print(msg)
    assert fp8_full <= 1.1 * bf16_full + 4 * mib, msg
    assert fp8_full < 0.35 * fp8_none, msg


@pytest.mark.parametrize("backend,op", [("triton", "titankit::fp8_gemm"),
                                        ("thunderkittens", "titankit::tk_fp8_gemm_rowwise")])
def test_selective_ac_reruns_no_custom_fp8_gemm(backend, op):
    """Per-op selective AC keeps every FP8 GEMM output of our custom GEMM ops, as it does for
    aten._scaled_mm: the backward of a compiled 2-block model runs only the 28 gradient GEMMs
    (dgrad and wgrad of 7 Float8Linears x 2 blocks), the same as without AC. Before the ops were on
    the policy's list, each block's backward re-ran 6 forward GEMMs (an 8B FP8 step with the TK
    backend made 108 GEMM launches instead of 84)."""
    from torch.profiler import ProfilerActivity, profile

    if backend == "thunderkittens":
        from kernels.thunderkittens import build

        if not build.available():
            pytest.skip("needs ThunderKittens (THUNDERKITTENS_ROOT) and an sm_90 GPU")
    calls = {}
    for ac_mode in ("none", "selective"):
        model, tokens = _compiled_2_block_model(True, ac_mode, backend)
        out = model(tokens)
        with profile(activities=[ProfilerActivity.CPU]) as prof:
            out.float().sum().backward()
        torch.cuda.synchronize()
        calls[ac_mode] = sum(e.name == op for e in prof.events())
    assert calls == {"none": 28, "selective": 28}, calls
