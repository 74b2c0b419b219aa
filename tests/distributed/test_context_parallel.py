"""Ring and all-gather context-parallel attention on real gloo worlds vs one-process attention.

Every rank builds the same random full-sequence q, k, v and output gradient, computes the
reference attention on the whole sequence, then runs ContextParallelAttention on its load-balanced
shard (chunks r and 2cp-1-r) and compares its output and dq/dk/dv with the matching rows of the
reference. GQA (4 query heads, 2 KV heads), with and without document masks, backends
"reference" and "sdpa". A compiled, selectively checkpointed block with CP attention must stay one
graph, match eager, and not rerun the CP forward (its communication) during recomputation.
"""

from __future__ import annotations

import collections
import os
import socket
import traceback
import types

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch import nn
from torch.utils._python_dispatch import TorchDispatchMode

from kernels.attention import attention
from trainer.parallel.checkpointing import apply_ac
from trainer.parallel.context import ContextParallelAttention, load_balanced_index
from tests.helpers.cpu import cpu_children

pytestmark = pytest.mark.slow


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _entry(rank: int, world: int, port: int, fn, args) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE=str(world), LOCAL_RANK=str(rank), OMP_NUM_THREADS="1")
    torch.set_num_threads(1)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        fn(rank, world, *args)
    except Exception:
        # Name the failing rank: mp.spawn shows only the first failure.
        raise RuntimeError(f"rank {rank} failed:\n{traceback.format_exc()}") from None
    finally:
        dist.destroy_process_group()
    os._exit(0)  # no interpreter teardown: it can abort a gloo rank after a passing run (test_rmsnorm.py)


def spawn_world(world: int, fn, *args) -> None:
    """Run fn(rank, world, *args) on `world` gloo ranks (fn must be a module-level function)."""
    with cpu_children():
        mp.spawn(_entry, args=(world, free_port(), fn, args), nprocs=world, join=True)


CASES = [(m, doc, be) for m in ("ring", "allgather") for doc in (False, True)
         for be in ("reference", "sdpa")]


def _check_cp(rank: int, world: int) -> None:
    group = dist.group.WORLD
    b, s, hq, hkv, d = 2, 8 * world, 4, 2, 8
    for method, use_doc, backend in CASES:
        g = torch.Generator().manual_seed(1234)
        q = torch.randn(b, s, hq, d, generator=g, dtype=torch.float64).float()
        k = torch.randn(b, s, hkv, d, generator=g, dtype=torch.float64).float()
        v = torch.randn(b, s, hkv, d, generator=g, dtype=torch.float64).float()
        dout = torch.randn(b, s, hq, d, generator=g, dtype=torch.float64).float()
        doc = None
        if use_doc:
            # Random document boundaries (sorted ids per row), different per sample.
            cuts = torch.rand(b, s, generator=g) < 0.15
            doc = torch.cumsum(cuts.int(), dim=1).int()
        qr, kr, vr = (t.clone().requires_grad_() for t in (q, k, v))
        ref = attention(qr, kr, vr, causal=True, doc_ids=doc, backend="reference")
        ref.backward(dout)

        idx = load_balanced_index(s, world, rank)
        ql, kl, vl = (t[:, idx].clone().requires_grad_() for t in (q, k, v))
        core = ContextParallelAttention(group, method, backend)
        out = core(ql, kl, vl, None if doc is None else doc[:, idx].contiguous())
        out.backward(dout[:, idx])
        name = f"{method} doc={use_doc} backend={backend} cp={world}"
        torch.testing.assert_close(out, ref[:, idx], rtol=1e-5, atol=1e-5, msg=lambda m: f"{name} out: {m}")
        for got, want, what in ((ql.grad, qr.grad, "dq"), (kl.grad, kr.grad, "dk"),
                                (vl.grad, vr.grad, "dv")):
            torch.testing.assert_close(got, want[:, idx], rtol=1e-4, atol=1e-5,
                                       msg=lambda m: f"{name} {what}: {m}")


@pytest.mark.parametrize("world", [2, 4])
def test_cp_attention_matches_single_process(world: int) -> None:
    spawn_world(world, _check_cp)


class _Block(nn.Module):
    """A tiny attention block: projections around the CP core, like a Llama block's attention."""

    def __init__(self, core: nn.Module):
        super().__init__()
        self.wq, self.wo = nn.Linear(32, 32, bias=False), nn.Linear(32, 32, bias=False)
        self.wk, self.wv = nn.Linear(32, 16, bias=False), nn.Linear(32, 16, bias=False)  # GQA
        self.core = core

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, 4, 8).sin()  # element-wise ops that checkpointing recomputes
        k = self.wk(x).view(b, s, 2, 8).cos()
        v = self.wv(x).view(b, s, 2, 8)
        return x + self.wo(self.core(q, k, v, None).reshape(b, s, 32)).relu()


class _CountOps(TorchDispatchMode):
    def __init__(self):
        super().__init__()
        self.calls: collections.Counter = collections.Counter()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.calls[str(func.overloadpacket)] += 1
        return func(*args, **(kwargs or {}))


def _check_compiled_cp(rank: int, world: int) -> None:
    import torch._dynamo
    from torch._dynamo.utils import counters

    s = 8 * world
    x_full = torch.randn(2, s, 32, generator=torch.Generator().manual_seed(3))
    x_local = x_full[:, load_balanced_index(s, world, rank)]
    for method in ("ring", "allgather"):
        results = {}
        for compiled in (False, True):
            torch.manual_seed(0)
            model = nn.Module()
            model.layers = nn.ModuleDict(
                {"0": _Block(ContextParallelAttention(dist.group.WORLD, method, "sdpa"))})
            apply_ac(model, types.SimpleNamespace(mode="selective", selective_ac_option="op"))
            block = model.layers["0"]
            if compiled:
                torch._dynamo.reset()
                counters.clear()
                # aot_eager runs the same dynamo trace and activation-checkpoint partitioning as
                # inductor, without its C++ compile time.
                block.compile(backend="aot_eager")
            x = x_local.clone().requires_grad_()
            y = block(x)
            counting = _CountOps()
            with counting:
                y.square().sum().backward()
            name = f"{method} compiled={compiled}"
            # Recomputation must reuse the saved CP output, not rerun the ring / all-gather.
            assert counting.calls["titankit.cp_attention_fwd"] == 0, (name, counting.calls)
            assert counting.calls["titankit.cp_attention_bwd"] == 1, (name, counting.calls)
            results[compiled] = (y.detach(), x.grad, block.wq.weight.grad)
            if compiled:
                assert not counters["graph_break"], f"{name}: {dict(counters['graph_break'])}"
                assert counters["stats"]["unique_graphs"] == 1, dict(counters["stats"])
        for got, want in zip(results[True], results[False]):
            torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)


def test_compiled_checkpointed_block_is_one_graph() -> None:
    spawn_world(2, _check_compiled_cp)


def test_load_balanced_index() -> None:
    # cp=2, seq 8: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    assert load_balanced_index(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert load_balanced_index(8, 2, 1).tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="2 x context_parallel_degree"):
        load_balanced_index(10, 2, 0)
