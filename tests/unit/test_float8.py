"""trainer/float8.py on CPU: the "torch" backend's emulation (real e4m3 quantization, fp32 matmul)."""

from __future__ import annotations

import logging

import pytest
import torch
from torch import nn

from kernels.fp8 import reference as R
from trainer.config.schema import Float8
from trainer.float8 import Float8Linear, convert_to_float8_training

RECIPES = ("tensorwise", "rowwise")


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return ((a - b).norm() / b.norm()).item()


def _run(layer: nn.Module, x: torch.Tensor, g: torch.Tensor):
    xi = x.clone().requires_grad_()
    out = layer(xi)
    out.backward(g)
    grads = (out.detach(), xi.grad, layer.weight.grad.clone(), layer.bias.grad.clone())
    layer.weight.grad = layer.bias.grad = None
    return grads


@pytest.mark.parametrize("recipe", RECIPES)
@pytest.mark.parametrize("gw_hp", [False, True])
def test_forward_backward_close_to_linear(recipe, gw_hp):
    torch.manual_seed(0)
    lin = nn.Linear(128, 96)
    x = torch.randn(4, 32, 128) * 2
    g = torch.randn(4, 32, 96)
    ref = _run(lin, x, g)
    f8 = _run(Float8Linear.from_linear(lin, recipe, "torch", gw_hp), x, g)
    # e4m3 keeps 3 mantissa bits: ~2.5% RMS rounding error per operand, ~3.5% for a product.
    for name, a, b in zip(("out", "grad_input", "grad_weight"), f8[:3], ref[:3]):
        assert _rel(a, b) < 5e-2, name
    assert torch.allclose(f8[3], ref[3], rtol=1e-6, atol=1e-6)  # bias grad: untouched by FP8
    if gw_hp:
        assert _rel(f8[2], ref[2]) < 1e-6


@pytest.mark.parametrize("recipe", RECIPES)
def test_matches_the_reference_recipe(recipe):
    """Exactly the three GEMMs of the recipe: operand layouts and scaling axes are the right ones."""
    torch.manual_seed(1)
    lin = nn.Linear(64, 48, bias=False)
    x = torch.randn(32, 64)
    g = torch.randn(32, 48)
    xi = x.clone().requires_grad_()
    out = Float8Linear.from_linear(lin, recipe, "torch")(xi)
    out.backward(g)
    w = lin.weight.detach()
    if recipe == "rowwise":
        def q_row(t):
            return R.quantize_rowwise(t)

        def q_col(t):
            qt, inv = R.quantize_colwise_t(t)
            return qt.t(), inv.reshape(1, -1)  # (K, N) column-major operand, (1, N) scale
    else:
        def q_row(t):
            return R.quantize_tensorwise(t)

        def q_col(t):
            return R.quantize_tensorwise(t)

    def mm(a, b):
        return R.scaled_mm(a[0], b[0], a[1], b[1], torch.float32)

    qw_k = R.quantize_rowwise(w) if recipe == "rowwise" else R.quantize_tensorwise(w)
    w_op = (qw_k[0].t(), qw_k[1].reshape(1, -1) if recipe == "rowwise" else qw_k[1])
    assert torch.equal(out, mm(q_row(x), w_op))
    assert torch.equal(xi.grad, mm(q_row(g), q_col(w)))  # dy (M, N) @ w (N, K), w scaled per K
    if recipe == "rowwise":
        qdyt, sdyt = R.quantize_colwise_t(g)  # (N, M), per output feature over tokens
        dw = mm((qdyt, sdyt), q_col(x))
    else:
        dw = mm((q_row(g)[0].t(), q_row(g)[1]), q_col(x))
    assert torch.equal(lin.weight.grad, dw)


@pytest.mark.parametrize("recipe", RECIPES)
def test_nan_and_zero_rows(recipe):
    """A NaN token poisons only its own output row; an all-zero token gives exactly the bias."""
    torch.manual_seed(2)
    lin = nn.Linear(64, 32)
    f8 = Float8Linear.from_linear(lin, recipe, "torch")
    x = torch.randn(16, 64)
    x[3, 5] = float("nan")
    x[4] = 0.0
    out = f8(x)
    assert bool(torch.isnan(out[3]).all())
    assert bool(torch.isfinite(out[torch.arange(16) != 3]).all())
    assert torch.equal(out[4], lin.bias.detach())


@pytest.mark.parametrize("recipe", RECIPES)
def test_huge_and_tiny_inputs_stay_finite(recipe):
    torch.manual_seed(3)
    lin = nn.Linear(64, 32, bias=False)
    f8 = Float8Linear.from_linear(lin, recipe, "torch")
    for scale in (1e-10, 1e30, 1e-30):
        x = (torch.randn(16, 64) * scale).requires_grad_()
        out = f8(x)
        if scale > R.AMAX_EPS:
            ref = lin(x)
            assert _rel(out / scale, ref / scale) < 5e-2
        else:  # below AMAX_EPS a tensor quantizes to zero (reference.py), never to inf or NaN
            assert not bool(out.any())
        out.backward(torch.randn_like(out))
        assert bool(torch.isfinite(x.grad).all()) and bool(torch.isfinite(lin.weight.grad).all())
        lin.weight.grad = None


class _Net(nn.Module):
    def __init__(self):
        super().__init__()
        self.layers = nn.ModuleDict({"0": nn.Linear(32, 64), "1": nn.Linear(64, 64)})
        self.small = nn.Linear(64, 10)  # 10 is not a multiple of 16
        self.output = nn.Linear(64, 32)

    def forward(self, x):
        h = torch.relu(self.layers["0"](x))
        h = torch.relu(self.layers["1"](h))
        return self.output(h) + self.small(h).sum(-1, keepdim=True)


def test_convert_respects_filters_and_shares_parameters(logs):
    net = _Net()
    w0 = net.layers["0"].weight
    done = convert_to_float8_training(net, Float8(enable=True, recipe="rowwise"))
    assert done == ["layers.0", "layers.1"]
    assert isinstance(net.layers["1"], Float8Linear) and net.layers["1"].recipe == "rowwise"
    assert type(net.small) is nn.Linear and type(net.output) is nn.Linear
    assert net.layers["0"].weight is w0  # same Parameter: optimizers and FSDP see no change
    lines = logs.at(logging.INFO, "float8:")  # the project logger: it reaches the run's log
    assert len(lines) == 1 and "2 Linear layers" in lines[0] and "2 kept" in lines[0]
    net2 = _Net()
    assert convert_to_float8_training(net2, Float8(enable=True, filter_fqns=["layers.1", "output"])) == ["layers.0"]
    assert convert_to_float8_training(_Net(), Float8(enable=False)) == []


def test_a_filter_that_matches_no_layer_warns(logs, monkeypatch):
    """Was silent: a typo in float8.filter_fqns ("outptu") kept nothing in high precision, so the
    output layer trained in FP8 while the user had asked for bf16."""
    monkeypatch.setenv("RANK", "0")
    net = _Net()
    done = convert_to_float8_training(net, Float8(enable=True, filter_fqns=["outptu", "layers.1"]))
    assert done == ["layers.0", "output"]  # the typo keeps nothing; layers.1 is kept
    (line,) = logs.at(logging.WARNING, "float8.filter_fqns")
    assert line.startswith("float8.filter_fqns: 'outptu' matches no Linear or MoE experts of the "
                           "model, so it keeps nothing in high precision (did you mean 'output'?)")
    monkeypatch.setenv("RANK", "1")  # said by rank 0 only
    convert_to_float8_training(_Net(), Float8(enable=True, filter_fqns=["outptu"]))
    assert len(logs.at(logging.WARNING, "float8.filter_fqns")) == 1


def test_convert_on_meta_then_materialize():
    with torch.device("meta"):
        net = _Net()
    convert_to_float8_training(net, Float8(enable=True))
    net.to_empty(device="cpu")
    for p in net.parameters():
        nn.init.normal_(p, std=0.05)
    assert torch.isfinite(net(torch.randn(2, 8, 32))).all()


@pytest.mark.parametrize("key,value,match", [
    ("recipe", "delayed", "float8.recipe"),
    ("backend", "cublas", "float8.backend"),
    ("backend", "thunderkittens", "THUNDERKITTENS_ROOT"),
    ("filter_fqns", "output", "float8.filter_fqns"),
])
def test_config_errors_name_the_key(key, value, match):
    with pytest.raises(ValueError, match=match):
        convert_to_float8_training(_Net(), Float8(enable=True, **{key: value}))


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the CPU error")
def test_triton_backend_on_cpu_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)
    with pytest.raises(ValueError, match="needs a CUDA GPU"):
        convert_to_float8_training(_Net(), Float8(enable=True, backend="triton"))


def test_token_count_must_be_a_multiple_of_16():
    f8 = Float8Linear.from_linear(nn.Linear(32, 32), "tensorwise", "torch")
    with pytest.raises(ValueError, match="multiple of 16"):
        f8(torch.randn(3, 5, 32))
    with pytest.raises(ValueError, match="multiples of 16"):
        Float8Linear(24, 32)


@pytest.mark.parametrize("recipe", RECIPES)
def test_compile_traces_without_graph_breaks(recipe):
    torch.manual_seed(4)
    lin = nn.Linear(64, 96)
    f8 = Float8Linear.from_linear(lin, recipe, "torch")
    x, g = torch.randn(2, 16, 64), torch.randn(2, 16, 96)
    eager = _run(f8, x, g)
    torch._dynamo.reset()
    compiled = _run(torch.compile(f8, backend="aot_eager", fullgraph=True), x, g)
    for a, b in zip(compiled, eager):
        assert torch.equal(a, b)


@pytest.mark.parametrize("recipe", RECIPES)
def test_tiny_mlp_trains_in_fp8(recipe):
    """A 2-layer MLP fits a random teacher in FP8 emulation about as well as in fp32."""
    def train(fp8: bool) -> list[float]:
        torch.manual_seed(5)
        net = nn.Sequential(nn.Linear(32, 64), nn.GELU(), nn.Linear(64, 16))
        if fp8:
            assert len(convert_to_float8_training(net, Float8(enable=True, recipe=recipe))) == 2
        teacher = torch.randn(32, 16) / 32 ** 0.5
        opt = torch.optim.AdamW(net.parameters(), lr=1e-2)
        gen = torch.Generator().manual_seed(6)
        losses = []
        for _ in range(60):
            x = torch.randn(64, 32, generator=gen)
            loss = nn.functional.mse_loss(net(x), torch.tanh(x @ teacher))
            opt.zero_grad()
            loss.backward()
            opt.step()
            losses.append(loss.item())
        return losses

    f8, f32 = train(True), train(False)
    assert sum(f8[-5:]) / 5 < 0.2 * sum(f8[:5]) / 5  # the loss falls
    assert abs(sum(f8[-5:]) - sum(f32[-5:])) / sum(f32[-5:]) < 0.15  # and tracks fp32 training


def test_llama_module_names_meet_the_default_filter():
    """On the real Llama (trainer/models/llama.py) the defaults keep exactly `output` (by name) and
    the linears with a dimension not divisible by 16; every other linear of every block is FP8."""
    import dataclasses

    from trainer.models.llama import Llama
    from trainer.models.llama_flavors import LLAMA3_FLAVORS

    blocks = [f"layers.{i}.{m}" for i in range(4) for m in (
        "attention.wq", "attention.wk", "attention.wv", "attention.wo",
        "feed_forward.w1", "feed_forward.w2", "feed_forward.w3")]
    with torch.device("meta"):
        model = Llama(LLAMA3_FLAVORS["debug"])  # dim 128, 8 heads of 16, FFN 384: all multiples of 16
    linears = {n for n, m in model.named_modules() if type(m) is nn.Linear}
    assert linears == set(blocks) | {"output"}  # the names the filter and the TP plan expect
    assert convert_to_float8_training(model, Float8(enable=True)) == blocks
    assert type(model.output) is nn.Linear and type(model.layers["3"].feed_forward.w2) is Float8Linear

    # dim 96, 4 heads of 24, 1 KV head: wk/wv (96 -> 24) are kept; wq/wo (96) and the FFN (256) not.
    with torch.device("meta"):
        odd = Llama(dataclasses.replace(LLAMA3_FLAVORS["debug"], dim=96, n_heads=4, n_kv_heads=1))
    assert convert_to_float8_training(odd, Float8(enable=True)) == [
        b for b in blocks if not b.endswith(("wk", "wv"))]


@pytest.mark.parametrize("granularity", ["rowwise", "tensorwise"])
def test_compiled_torch_backend_quantization_fuses(granularity):
    """The torch backend quantizes with eager ops (~10 kernels); under torch.compile (the trainer
    compiles each block) inductor fuses each quantization into one kernel with the same bits."""
    from torch._inductor.utils import run_and_get_code

    from kernels import fp8

    x = (torch.randn(64, 96) * torch.logspace(-3, 3, 64)[:, None]).bfloat16()
    for layout in ("row", "col_t"):
        def quantize(t, layout=layout):
            return fp8.quantize(t, granularity, layout, "reference")

        torch._dynamo.reset()
        (q, inv), code = run_and_get_code(torch.compile(quantize, fullgraph=True), x)
        rq, rinv = quantize(x)
        assert torch.equal(q.view(torch.uint8), rq.view(torch.uint8)) and torch.equal(inv, rinv), layout
        kernels = sum(c.count("async_compile.cpp_pybinding(") + c.count("async_compile.triton(")
                      for c in code)
        assert kernels == 1, f"{granularity} {layout}: {kernels} kernels"
