"""Activation checkpointing: same gradients in every mode, and each mode recomputes what it says.

Recomputation is observed directly: a dispatch mode counts the aten ops that run during backward.
Full checkpointing re-runs the block matmuls backward needs; selective per-op re-runs none of the
matmuls or attention kernels but does re-run the cheap element-wise ops (SiLU); every-2nd-block
re-runs the matmuls of half the blocks.
"""

from __future__ import annotations

import copy
from collections import Counter
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode

from trainer.models import FAMILIES
from trainer.parallel.checkpointing import apply_ac, parse_ac

N_LAYERS = 4
# A block runs 7 matmuls (wq, wk, wv, wo, w1, w2, w3), but recomputation needs only 6: backward
# never reads w2's output, and non-reentrant checkpointing stops recomputing once it has every
# tensor backward needs.
MM_PER_BLOCK = 6


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.counts: Counter = Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.counts[func.overloadpacket.__name__] += 1
        return func(*args, **(kwargs or {}))


def _model(n_layers: int = N_LAYERS) -> torch.nn.Module:
    fam = FAMILIES["llama3"]
    args = fam.make_args("debug", {"dim": 64, "n_layers": n_layers, "n_heads": 4,
                                   "n_kv_heads": 2, "vocab_size": 128})
    torch.manual_seed(0)
    model = fam.model_cls(args)
    model.init_weights()
    return model


def _backward_counts(model, tokens) -> tuple[Counter, dict[str, torch.Tensor]]:
    logits = model(tokens)
    loss = F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())
    counter = _CountOps()
    with counter:
        loss.backward()
    from trainer.models.llama import canonical_fqn

    grads = {canonical_fqn(n): p.grad for n, p in model.named_parameters()}
    return counter.counts, grads


def _ac(mode: str, option: str = "op"):
    return SimpleNamespace(mode=mode, selective_ac_option=option)


@pytest.fixture(scope="module")
def baseline():
    model = _model()
    tokens = torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))
    counts, grads = _backward_counts(model, tokens)
    return model, tokens, counts, grads


@pytest.mark.parametrize(
    "mode,option,recomputed_mm,recomputes_silu",
    [
        ("full", "op", MM_PER_BLOCK * N_LAYERS, True),
        ("selective", "op", 0, True),
        ("selective", "2", MM_PER_BLOCK * N_LAYERS // 2, True),
    ],
)
def test_ac_modes_same_grads_and_expected_recompute(baseline, mode, option, recomputed_mm,
                                                    recomputes_silu):
    base_model, tokens, base_counts, base_grads = baseline
    model = copy.deepcopy(base_model)
    model.zero_grad(set_to_none=True)
    apply_ac(model, _ac(mode, option))
    wrapped = sum("CheckpointWrapper" in type(b).__name__ for b in model.layers.values())
    assert wrapped == (N_LAYERS // 2 if option == "2" else N_LAYERS)
    counts, grads = _backward_counts(model, tokens)
    assert grads.keys() == base_grads.keys()
    for fqn, g in grads.items():
        torch.testing.assert_close(g, base_grads[fqn], rtol=1e-6, atol=1e-7, msg=fqn)
    assert counts["mm"] - base_counts["mm"] == recomputed_mm
    # The attention kernel (SDPA's CPU flash op) is saved by the per-op policy, recomputed by full.
    attn = "_scaled_dot_product_flash_attention_for_cpu"
    extra_attn = counts[attn] - base_counts[attn]
    assert extra_attn == (0 if option == "op" and mode == "selective" else recomputed_mm // MM_PER_BLOCK)
    assert (counts["silu"] > base_counts["silu"]) == recomputes_silu


def test_ac_none_wraps_nothing(baseline):
    model = copy.deepcopy(baseline[0])
    apply_ac(model, _ac("none"))
    assert not any("CheckpointWrapper" in type(b).__name__ for b in model.layers.values())


@pytest.mark.parametrize("mode,option,match", [
    ("partial", "op", "activation_checkpoint.mode = 'partial'"),
    ("selective", "0", "selective_ac_option = '0'"),
    ("selective", "every", "selective_ac_option = 'every'"),
])
def test_bad_ac_config_names_the_key(mode, option, match):
    with pytest.raises(ValueError, match=match):
        parse_ac(_ac(mode, option))


def _scaled_mm_on_cpu() -> bool:
    a = torch.zeros(16, 16).to(torch.float8_e4m3fn)
    try:
        torch._scaled_mm(a, a.t(), torch.tensor(1.0), torch.tensor(1.0), out_dtype=torch.bfloat16)
        return True
    except (RuntimeError, NotImplementedError):
        return False


def _compiled_fp8_backward_scaled_mms(mode: str, monkeypatch) -> tuple[int, dict]:
    """aten._scaled_mm calls in the backward of a compiled 2-block FP8 model under AC `mode`, and
    the gradients."""
    import trainer.float8 as f8
    from torch.profiler import ProfilerActivity, profile
    from trainer.parallel.compile import apply_compile

    # The CUDA GEMM path (torch._scaled_mm) on CPU, so the graph is the one GPUs compile.
    monkeypatch.setattr(f8.Float8Linear, "_gemm_backend", lambda self, x: "torch")
    torch._dynamo.reset()
    model = _model(n_layers=2).to(torch.bfloat16)
    f8.convert_to_float8_training(model, SimpleNamespace(
        enable=True, recipe="tensorwise", backend="torch", grad_weight_high_precision=False,
        filter_fqns=["output"]))
    apply_ac(model, _ac(mode), compiled=True)
    apply_compile(model)
    tokens = torch.randint(0, 128, (1, 32), generator=torch.Generator().manual_seed(1))
    model(tokens).float().sum().backward()  # compiles
    model.zero_grad(set_to_none=True)
    out = model(tokens)
    with profile(activities=[ProfilerActivity.CPU]) as prof:
        out.float().sum().backward()
    from trainer.models.llama import canonical_fqn

    grads = {canonical_fqn(n): p.grad for n, p in model.named_parameters()}
    return sum(e.name == "aten::_scaled_mm" for e in prof.events()), grads


def test_full_ac_recomputes_fp8_gemms_when_compiled(monkeypatch):
    """Full AC of a compiled block must recompute the forward FP8 GEMMs, not keep their outputs,
    and give the same gradients as no AC.

    On torch 2.11 plain checkpoint left the ops inside Float8Linear's autograd.Function untagged,
    so the compiled graph saved every GEMM output (as much memory as no AC; pytorch#177396); the
    GPU twin of this test measures that memory (tests/gpu/test_fp8_gpu.py)."""
    if not _scaled_mm_on_cpu():
        pytest.skip("this torch has no CPU torch._scaled_mm")
    no_ac, no_ac_grads = _compiled_fp8_backward_scaled_mms("none", monkeypatch)
    full, full_grads = _compiled_fp8_backward_scaled_mms("full", monkeypatch)
    assert no_ac == 2 * 7 * 2  # grad_input and grad_weight of 7 Float8Linears in each of 2 blocks
    # Backward needs 6 of a block's 7 forward GEMMs (w2's output feeds only the residual add).
    assert full - no_ac >= 6 * 2
    assert full_grads.keys() == no_ac_grads.keys()
    differ = [fqn for fqn, g in full_grads.items() if not torch.equal(g, no_ac_grads[fqn])]
    if differ and torch.__version__ < "2.12":
        # Seen on torch 2.11 (CPU): the attention halves' gradients and everything below differ at
        # FP8 rounding level (up to 4% of an entry), while bf16 without FP8 stays bitwise under the
        # same AC. Inductor fuses a bf16 input into its e4m3 cast without the intermediate bf16
        # rounding, differently in the forward and in the recomputation: with
        # torch._inductor.config.emulate_precision_casts = True they agree bit for bit on 2.11
        # (checked 2026-12-01). torch >= 2.13: bitwise with the default.
        pytest.xfail(f"torch {torch.__version__}: recomputed FP8 forward differs in {differ[:3]}...")
    assert not differ, differ  # recomputation repeats the same quantization: same bits


def test_per_op_policy_saves_dense_and_fp8_gemms_and_attention():
    """The per-op policy keeps the outputs of aten's dense and FP8 GEMMs and of our kernels'
    custom FP8 GEMM and attention ops (float8.backend triton / thunderkittens). Missing one means its
    forward re-runs in every backward (the FP8 GEMMs of the TK backend did: 108 instead of 84 GEMM
    launches per step on a 4-layer 8B). The cheap ops (norm, SwiGLU, FP8 quantization) are
    recomputed."""
    import kernels.attention.triton_op  # noqa: F401  (registers titankit::flash_attn_fwd)
    import kernels.fp8.gemm_fp8_sm90  # noqa: F401
    import kernels.fp8.quantize_e4m3  # noqa: F401
    import kernels.norm.op  # noqa: F401
    import kernels.thunderkittens.ops  # noqa: F401  (defines the ops; builds nothing)
    from torch.utils.checkpoint import CheckpointPolicy

    from trainer.parallel.checkpointing import _save_list, op_policy

    policy = op_policy(_save_list())
    aten, tk = torch.ops.aten, torch.ops.titankit
    saved = [aten.mm.default, aten._scaled_mm.default, tk.fp8_gemm.default,
             tk.tk_fp8_gemm_rowwise.default, tk.tk_attn_fwd.default, tk.flash_attn_fwd.default]
    recomputed = [aten.silu.default, aten.mul.Tensor, tk.rms_norm.default,
                  tk.fp8_quantize_tensorwise.default, tk.fp8_amax.default]
    for op in saved:
        assert policy(None, op) == CheckpointPolicy.MUST_SAVE, op
    for op in recomputed:
        assert policy(None, op) == CheckpointPolicy.PREFER_RECOMPUTE, op


def test_every_other_mm_is_torchtitans_per_op_rule(baseline):
    """selective_ac_option = "op_every_other_mm": of each block's dense matmuls in call order the
    2nd, 4th, ... are recomputed (torchtitan v0.2.2's "op"); attention stays saved; gradients equal."""
    base_model, tokens, base_counts, base_grads = baseline
    model = copy.deepcopy(base_model)
    model.zero_grad(set_to_none=True)
    apply_ac(model, _ac("selective", "op_every_other_mm"))
    counts, grads = _backward_counts(model, tokens)
    for fqn, g in grads.items():
        torch.testing.assert_close(g, base_grads[fqn], rtol=1e-6, atol=1e-7, msg=fqn)
    assert counts["mm"] - base_counts["mm"] == (MM_PER_BLOCK // 2) * N_LAYERS
    attn = "_scaled_dot_product_flash_attention_for_cpu"
    assert counts[attn] == base_counts[attn]


def test_every_other_mm_counts_forward_and_recompute_apart():
    from types import SimpleNamespace as NS

    from torch.utils.checkpoint import CheckpointPolicy

    from trainer.parallel.checkpointing import _save_list, op_policy

    policy = op_policy(_save_list(), every_other_mm=True)
    mm, fwd, rec = torch.ops.aten.mm.default, NS(is_recompute=False), NS(is_recompute=True)
    save, again = CheckpointPolicy.MUST_SAVE, CheckpointPolicy.PREFER_RECOMPUTE
    assert [policy(fwd, mm) for _ in range(3)] == [save, again, save]
    # The recompute pass asks again for the block's matmuls in the same order; its own count
    # starts at 1, so it picks the same ones the forward saved.
    assert [policy(rec, mm) for _ in range(3)] == [save, again, save]
    assert policy(fwd, torch.ops.aten._scaled_mm.default) == save  # FP8 GEMMs: never counted
