"""Per-block torch.compile: same loss and gradients as eager, parameter names unchanged.

Compiling with inductor on CPU costs ~30 s on 2 cores, so this is one small case.
"""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

from trainer.models import FAMILIES
from trainer.parallel.compile import apply_compile

pytestmark = pytest.mark.slow


def _loss(model, tokens):
    return F.cross_entropy(model(tokens).flatten(0, 1), tokens.roll(-1, 1).flatten())


def _tiny_model():
    fam = FAMILIES["llama3"]
    args = fam.make_args("debug", {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                   "vocab_size": 128})
    torch.manual_seed(0)
    model = fam.model_cls(args)
    model.init_weights()
    return model


def _tokens():
    return torch.randint(0, 128, (2, 32), generator=torch.Generator().manual_seed(1))


def test_compiled_blocks_match_eager():
    eager = _tiny_model()
    compiled = copy.deepcopy(eager)
    apply_compile(compiled)
    assert [n for n, _ in compiled.named_parameters()] == [n for n, _ in eager.named_parameters()]

    tokens = _tokens()
    want = _loss(eager, tokens)
    want.backward()
    got = _loss(compiled, tokens)
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=0)
    for (name, p), (_, q) in zip(eager.named_parameters(), compiled.named_parameters()):
        torch.testing.assert_close(q.grad, p.grad, rtol=1e-4, atol=1e-6, msg=name)


def test_compiled_loss_matches_eager_values_and_gradients():
    """The trainer compiles its cross-entropy with the blocks (no fp32 copies of the logits)."""
    from trainer.parallel.compile import compile_loss
    from trainer.trainer import token_loss_sum

    g = torch.Generator().manual_seed(2)
    logits = torch.randn(2, 16, 300, generator=g, dtype=torch.float64).float().requires_grad_()
    labels = torch.randint(0, 300, (2, 16), generator=g)
    want = token_loss_sum(logits, labels, 64)
    (want_grad,) = torch.autograd.grad(want, logits)
    got = compile_loss(token_loss_sum)(logits, labels, 64)
    (got_grad,) = torch.autograd.grad(got, logits)
    torch.testing.assert_close(got, want, rtol=1e-6, atol=0)
    torch.testing.assert_close(got_grad, want_grad, rtol=1e-5, atol=1e-8)


def _saved_bytes_and_grads(budget: float, eager, tokens):
    """Compile a copy of `eager` with `budget`; bytes kept for backward by one forward, loss, grads."""
    torch._dynamo.reset()
    model = copy.deepcopy(eager)
    apply_compile(model, memory_budget=budget)
    saved = [0]

    def pack(t):
        saved[0] += t.numel() * t.element_size()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        loss = _loss(model, tokens)
    loss.backward()
    return saved[0], loss, {n: p.grad for n, p in model.named_parameters()}


def test_memory_budget_keeps_fewer_activations_and_the_same_gradients():
    """activation_checkpoint.mode = "memory_budget": the compiler recomputes instead of keeping."""
    eager = _tiny_model()
    tokens = _tokens()
    try:
        full, loss_full, grads_full = _saved_bytes_and_grads(1.0, eager, tokens)
        low, loss_low, grads_low = _saved_bytes_and_grads(0.05, eager, tokens)
    finally:
        import torch._functorch.config as functorch_config

        functorch_config.activation_memory_budget = 1.0
        torch._dynamo.reset()
    assert low < 0.8 * full, (low, full)
    torch.testing.assert_close(loss_low, loss_full, rtol=1e-6, atol=0)
    for name, g in grads_full.items():
        torch.testing.assert_close(grads_low[name], g, rtol=1e-5, atol=1e-7, msg=name)
