"""Ring and all-gather context-parallel attention on real gloo worlds vs one-process attention.

Every rank builds the same random full-sequence q, k, v and output gradient, computes the
reference attention on the whole sequence, then runs ContextParallelAttention on its load-balanced
shard (chunks r and 2cp-1-r) and compares its output and dq/dk/dv with the matching rows of the
reference. GQA (4 query heads, 2 KV heads), with and without document masks, backends
"reference" and "sdpa".
"""

from __future__ import annotations

import os
import socket
import traceback

import pytest
import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from kernels.attention import attention
from trainer.parallel.context import ContextParallelAttention, load_balanced_index

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


def spawn_world(world: int, fn, *args) -> None:
    """Run fn(rank, world, *args) on `world` gloo ranks (fn must be a module-level function)."""
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


def test_load_balanced_index() -> None:
    # cp=2, seq 8: chunks of 2; rank 0 holds chunks 0 and 3, rank 1 chunks 1 and 2.
    assert load_balanced_index(8, 2, 0).tolist() == [0, 1, 6, 7]
    assert load_balanced_index(8, 2, 1).tolist() == [2, 3, 4, 5]
    with pytest.raises(ValueError, match="2 x context_parallel_degree"):
        load_balanced_index(10, 2, 0)
