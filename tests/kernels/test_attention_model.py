"""`model.attention = "triton"` in the Llama model, eager and under the trainer's per-block
torch.compile (inductor), in Triton's CPU interpreter: same loss and gradients as the reference
backend, with and without document masking. Inductor on CPU costs ~30 s on 2 cores."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import copy  # noqa: E402
import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

pytest.importorskip("triton")

from kernels.attention import triton_bwd, triton_fwd, triton_launch  # noqa: E402
from trainer.models import FAMILIES  # noqa: E402
from trainer.parallel.compile import apply_compile  # noqa: E402

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module", autouse=True)
def interpreted_kernels():
    if not triton_launch.interpreted():
        importlib.reload(triton_fwd)
        importlib.reload(triton_bwd)
    yield


def _model(backend: str) -> torch.nn.Module:
    fam = FAMILIES["llama3"]
    args = fam.make_args("debug", {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2,
                                   "vocab_size": 128, "attention": backend})
    torch.manual_seed(0)
    model = fam.model_cls(args)
    model.init_weights()
    return model


def _loss_and_grads(model, tokens, doc_ids):
    logits = model(tokens, doc_ids=doc_ids)
    loss = F.cross_entropy(logits.flatten(0, 1), tokens.roll(-1, 1).flatten())
    loss.backward()
    return loss.detach(), {n: p.grad for n, p in model.named_parameters()}


def test_triton_backend_in_llama_eager_and_compiled():
    from torch._dynamo.utils import counters

    counters.clear()
    g = torch.Generator().manual_seed(1)
    tokens = torch.randint(0, 128, (2, 40), generator=g)
    # Packed documents of random lengths (a new document where the coin says so).
    doc_ids = torch.cumsum((torch.rand(2, 40, generator=g) < 0.15).int(), dim=1).int()
    reference = _model("reference")
    eager = _model("triton")
    compiled = apply_compile(copy.deepcopy(eager))
    assert eager.layers["0"].attention.core.backend == "triton"
    for docs in (None, doc_ids):
        for m in (reference, eager, compiled):
            m.zero_grad(set_to_none=True)
        want_loss, want = _loss_and_grads(reference, tokens, docs)
        got_loss, got = _loss_and_grads(eager, tokens, docs)
        comp_loss, comp = _loss_and_grads(compiled, tokens, docs)
        torch.testing.assert_close(got_loss, want_loss, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(comp_loss, got_loss, rtol=1e-5, atol=1e-6)
        for name, ref in want.items():
            torch.testing.assert_close(got[name], ref, rtol=1e-4, atol=1e-6, msg=name)
            torch.testing.assert_close(comp[name], got[name], rtol=1e-4, atol=1e-6, msg=name)
    # The custom ops trace: the blocks compile to whole graphs (a break would show here).
    assert counters["stats"]["unique_graphs"] >= 1 and not counters["graph_break"]
