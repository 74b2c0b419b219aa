"""Context parallelism (CP) written on the attention_fwd / attention_bwd contract.

The sequence of every sample is cut into 2 x cp chunks; CP rank r holds chunks r and 2cp-1-r
("causal load balancing": every rank gets one early and one late chunk, so the causal work is
even). Everything but attention is token-local, so only `attention.core` of each block is replaced
(by `ContextParallelAttention`); the model code is untouched. Two methods:

ring       K/V blocks travel around the CP group with P2P send/recv (overlapped with compute); each
           rank merges the partial attention over each block by its log-sum-exp (Liu et al. 2023,
           "Ring Attention"). The backward runs the ring again, passing dK/dV accumulators along
           with the K/V blocks, using the GLOBAL out/lse so each block's gradient share is exact.
allgather  K/V are all-gathered over CP, each local query chunk attends to the prefix it may see
           (Llama 3 paper, section 3.3.2); the backward reduce-scatters dK/dV to their owners.

Both work with every backend of kernels.attention, on CPU (gloo) and CUDA (nccl). Partial outputs
are merged and dQ/dK/dV accumulated in fp32; the ring's dK/dV accumulators travel in fp32 too (exact
sums, at twice the bytes of bf16). Document masks: each rank's doc ids (B, S) are all-gathered once
per call (tiny). Under TP each TP rank runs its own CP ring over its local heads.
Shapes: q (B, S, Hq, D), k and v (B, S, Hkv, D), S = 2c the local sequence, c the chunk length.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn

from kernels.attention import attention_bwd, attention_fwd, merge_partials

logger = logging.getLogger("titankit")

METHODS = ("ring", "allgather")
SEQ_KEYS = ("tokens", "labels", "positions", "doc_ids")

# torch 2.13 renamed the single-tensor collectives (the old names warn); 2.11 has only the old ones.
_all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
_reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor


def _all_gather_stacked(x: torch.Tensor, group) -> torch.Tensor:
    """x (n0, ...) from every rank -> (cp, n0, ...); gloo wants the output concatenated on dim 0."""
    cp = dist.get_world_size(group)
    out = torch.empty((cp * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    _all_gather_single(out, x.contiguous(), group=group)
    return out.view((cp,) + tuple(x.shape))


# ----------------------------------------------------------------------------- batch sharding


def load_balanced_index(seq_len: int, cp: int, rank: int, device=None) -> torch.Tensor:
    """Global positions held by CP `rank`: chunks rank and 2cp-1-rank of 2cp, shape (seq_len/cp,)."""
    if seq_len % (2 * cp) != 0:
        raise ValueError(
            f"training.seq_len = {seq_len} must be divisible by 2 x context_parallel_degree = "
            f"{2 * cp} (each CP rank holds two load-balanced chunks)"
        )
    c = seq_len // (2 * cp)
    first = torch.arange(rank * c, (rank + 1) * c, device=device)
    last = torch.arange((2 * cp - 1 - rank) * c, (2 * cp - rank) * c, device=device)
    return torch.cat([first, last])


def shard_batch_for_cp(batch: dict, dims) -> dict:
    """This CP rank's share of a batch: tokens, labels, positions and doc_ids (B, S) -> (B, S/cp).

    `positions` are the true global positions (created as arange(S) when the batch has none), so
    RoPE sees the same angles as without CP. Other entries pass through unchanged.
    """
    mesh = dims.mesh["cp"]
    cp, rank = mesh.size(), mesh.get_local_rank()
    tokens = batch["tokens"]
    b, s = tokens.shape
    out = dict(batch)
    if out.get("positions") is None:
        out["positions"] = torch.arange(s, device=tokens.device).expand(b, s)
    idx = load_balanced_index(s, cp, rank, device=tokens.device)
    for key in SEQ_KEYS:
        t = out.get(key)
        if t is None:
            continue
        if t.dim() < 2 or t.shape[1] != s:
            raise ValueError(f"shard_batch_for_cp: batch[{key!r}] has shape {tuple(t.shape)}, "
                             f"expected (B, S) = {(b, s)}")
        out[key] = t.index_select(1, idx).contiguous()
    return out


# ----------------------------------------------------------------------------- helpers


def _f32_merge(acc_out, acc_lse, out, lse, rows: slice) -> None:
    """Merge a partial (out (B, n, H, D), lse (B, H, n)) into rows `rows` of the fp32 accumulators."""
    merged, merged_lse = merge_partials(acc_out[:, rows], acc_lse[:, :, rows], out, lse)
    acc_out[:, rows] = merged
    acc_lse[:, :, rows] = merged_lse


class _Ring:
    """P2P exchange with the ring neighbours in the CP group (rank r sends to r+1, receives from r-1)."""

    def __init__(self, group: dist.ProcessGroup):
        self.group = group
        self.rank = dist.get_rank(group)
        self.size = dist.get_world_size(group)
        self.next = dist.get_global_rank(group, (self.rank + 1) % self.size)
        self.prev = dist.get_global_rank(group, (self.rank - 1) % self.size)

    def start(self, send: torch.Tensor) -> tuple[torch.Tensor, list]:
        """Post send of `send` to next and receive of a like tensor from prev; returns (buf, works)."""
        recv = torch.empty_like(send)
        ops = [dist.P2POp(dist.isend, send, self.next, self.group),
               dist.P2POp(dist.irecv, recv, self.prev, self.group)]
        return recv, dist.batch_isend_irecv(ops)


def _wait(works: list) -> None:
    for w in works:
        w.wait()


def _doc_all(doc: torch.Tensor | None, group) -> torch.Tensor | None:
    """All CP ranks' local doc ids (B, S) -> (cp, B, S); tiny, gathered once per forward."""
    if doc is None:
        return None
    return _all_gather_stacked(doc, group)


def _sub(doc: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    return None if doc is None else doc[:, rows]


# ----------------------------------------------------------------------------- ring attention


def _ring_pair(r: int, s: int, c: int) -> tuple[slice, slice, bool]:
    """(query rows, key rows, causal) of the only attention rank r's queries need with rank s's K/V.

    s == r: the local causal mask over [chunk r; chunk 2cp-1-r] is exactly right (the late chunk
    sees all of the early one). s < r: chunk s precedes both query chunks and chunk 2cp-1-s follows
    both: all queries x first half of K/V. s > r: both of rank s's chunks lie between r and 2cp-1-r:
    second half of queries x all K/V. Fully masked pairs are never computed.
    """
    everything = slice(0, 2 * c)
    if s == r:
        return everything, everything, True
    if s < r:
        return everything, slice(0, c), False
    return slice(c, 2 * c), everything, False


class _RingAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, doc, group, backend):  # type: ignore[override]
        ring = _Ring(group)
        r, cp = ring.rank, ring.size
        c = q.shape[1] // 2
        docs = _doc_all(doc, group)
        kv = torch.stack([k, v]).contiguous()  # (2, B, S, Hkv, D): one message per step
        acc_out = acc_lse = None
        for j in range(cp):
            s = (r - j) % cp
            if j < cp - 1:
                nxt, works = ring.start(kv)
            qr, kr, causal = _ring_pair(r, s, c)
            out, lse = attention_fwd(
                q[:, qr].contiguous(), kv[0, :, kr].contiguous(), kv[1, :, kr].contiguous(),
                causal=causal, q_doc=_sub(doc, qr), kv_doc=None if docs is None else docs[s][:, kr],
                backend=backend,
            )
            if acc_out is None:  # step 0 covers every query row
                # Copies: the accumulators are updated in place, and selective activation
                # checkpointing may have cached `out`/`lse` (it refuses mutated cache entries).
                acc_out = out.to(torch.float32, copy=True)
                acc_lse = lse.to(torch.float32, copy=True)
            else:
                _f32_merge(acc_out, acc_lse, out, lse, qr)
            if j < cp - 1:
                _wait(works)
                kv = nxt
        out = acc_out.to(q.dtype)
        ctx.save_for_backward(q, k, v, out, acc_lse, docs)
        ctx.group, ctx.backend, ctx.has_doc = group, backend, doc is not None
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse, docs = ctx.saved_tensors
        docs = docs if ctx.has_doc else None
        ring = _Ring(ctx.group)
        r, cp = ring.rank, ring.size
        c = q.shape[1] // 2
        dout = dout.contiguous()
        doc = None if docs is None else docs[r]
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        kv = torch.stack([k, v]).contiguous()
        dkv = None  # fp32 (2, B, S, Hkv, D) accumulator of the K/V block held this step
        dkv_works: list = []
        for j in range(cp):
            s = (r - j) % cp
            if j < cp - 1:
                nxt, works = ring.start(kv)
            qr, kr, causal = _ring_pair(r, s, c)
            dq_p, dk_p, dv_p = attention_bwd(
                dout[:, qr].contiguous(), q[:, qr].contiguous(), kv[0, :, kr].contiguous(),
                kv[1, :, kr].contiguous(), out[:, qr].contiguous(), lse[:, :, qr].contiguous(),
                causal=causal, q_doc=_sub(doc, qr),
                kv_doc=None if docs is None else docs[s][:, kr], backend=ctx.backend,
            )
            dq[:, qr] += dq_p
            # The accumulator for block s arrives from rank r-1 (it held block s last step);
            # waiting only now lets that transfer overlap with this step's compute.
            if j == 0:
                dkv = torch.zeros((2,) + tuple(k.shape), dtype=torch.float32, device=k.device)
            else:
                _wait(dkv_works)
                dkv = dkv_in
            dkv[0, :, kr] += dk_p
            dkv[1, :, kr] += dv_p
            dkv_in, dkv_works = ring.start(dkv)
            if j < cp - 1:
                _wait(works)
                kv = nxt
        _wait(dkv_works)  # after cp hops the accumulator of our own block is back home
        return dq.to(q.dtype), dkv_in[0].to(k.dtype), dkv_in[1].to(v.dtype), None, None, None


# ----------------------------------------------------------------------------- all-gather KV


def _gather_global(x: torch.Tensor, group) -> torch.Tensor:
    """(n, B, 2c, H, D) local, load-balanced -> (n, B, 2c*cp, H, D) in global sequence order."""
    cp = dist.get_world_size(group)
    allx = _all_gather_stacked(x, group)  # (cp, n, B, 2c, H, D)
    c = x.shape[2] // 2
    # Rank s holds chunks s (first half) and 2cp-1-s (second half).
    firsts = [allx[s, :, :, :c] for s in range(cp)]
    lasts = [allx[s, :, :, c:] for s in reversed(range(cp))]
    return torch.cat(firsts + lasts, dim=2)


def _scatter_global(g: torch.Tensor, group) -> torch.Tensor:
    """Inverse layout of _gather_global, summed over ranks: (n, B, 2c*cp, H, D) -> (n, B, 2c, H, D)."""
    cp = dist.get_world_size(group)
    c = g.shape[2] // (2 * cp)
    chunks = g.split(c, dim=2)
    per_rank = torch.cat([torch.cat([chunks[s], chunks[2 * cp - 1 - s]], dim=2)
                          for s in range(cp)])  # (cp * n, B, 2c, H, D), rank-major
    out = torch.empty((g.shape[0],) + tuple(per_rank.shape[1:]), dtype=g.dtype, device=g.device)
    _reduce_scatter_single(out, per_rank, group=group)
    return out


def _ag_blocks(rank: int, cp: int, c: int):
    """For each local query chunk: (query rows, global chunk index g). Chunk g sees keys [0, (g+1)c):
    keys [0, g*c) with no mask and keys [g*c, (g+1)c) with a causal diagonal (Sq == Skv, so every
    backend's fused path applies)."""
    return [(slice(0, c), rank), (slice(c, 2 * c), 2 * cp - 1 - rank)]


class _AllGatherAttention(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, doc, group, backend):  # type: ignore[override]
        rank, cp = dist.get_rank(group), dist.get_world_size(group)
        c = q.shape[1] // 2
        kv = _gather_global(torch.stack([k, v]), group)  # (2, B, S_global, Hkv, D)
        gdoc = None
        if doc is not None:
            gdoc = _gather_global(doc.view(1, *doc.shape, 1, 1), group).view(doc.shape[0], -1)
        acc_out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
        acc_lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32,
                              device=q.device)
        for qr, g in _ag_blocks(rank, cp, c):
            o, lse = None, None
            for kr, causal in _ag_parts(g, c):
                o_p, lse_p = attention_fwd(
                    q[:, qr].contiguous(), kv[0, :, kr].contiguous(), kv[1, :, kr].contiguous(),
                    causal=causal, q_doc=_sub(doc, qr), kv_doc=_sub(gdoc, kr), backend=backend,
                )
                o, lse = (o_p.float(), lse_p.float()) if o is None else merge_partials(o, lse, o_p,
                                                                                       lse_p)
            acc_out[:, qr] = o
            acc_lse[:, :, qr] = lse
        out = acc_out.to(q.dtype)
        ctx.save_for_backward(q, kv, out, acc_lse, doc, gdoc)
        ctx.group, ctx.backend, ctx.has_doc = group, backend, doc is not None
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, kv, out, lse, doc, gdoc = ctx.saved_tensors
        if not ctx.has_doc:
            doc = gdoc = None
        group = ctx.group
        rank, cp = dist.get_rank(group), dist.get_world_size(group)
        c = q.shape[1] // 2
        dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
        dkv = torch.zeros(kv.shape, dtype=torch.float32, device=kv.device)
        for qr, g in _ag_blocks(rank, cp, c):
            for kr, causal in _ag_parts(g, c):
                dq_p, dk_p, dv_p = attention_bwd(
                    dout[:, qr].contiguous(), q[:, qr].contiguous(), kv[0, :, kr].contiguous(),
                    kv[1, :, kr].contiguous(), out[:, qr].contiguous(), lse[:, :, qr].contiguous(),
                    causal=causal, q_doc=_sub(doc, qr), kv_doc=_sub(gdoc, kr), backend=ctx.backend,
                )
                dq[:, qr] += dq_p
                dkv[0, :, kr] += dk_p
                dkv[1, :, kr] += dv_p
        dkv_local = _scatter_global(dkv, group)  # (2, B, 2c, Hkv, D), summed over every rank
        return dq.to(q.dtype), dkv_local[0].to(kv.dtype), dkv_local[1].to(kv.dtype), None, None, None


def _ag_parts(g: int, c: int) -> list[tuple[slice, bool]]:
    parts = [(slice(0, g * c), False)] if g > 0 else []
    return parts + [(slice(g * c, (g + 1) * c), True)]


# ----------------------------------------------------------------------------- the module


class ContextParallelAttention(nn.Module):
    """Drop-in for `attention.core`: forward(q, k, v, doc_ids) -> out on load-balanced local shards.

    Parameter-free like the core it replaces; `backend` is the kernels.attention backend.
    """

    def __init__(self, group: dist.ProcessGroup, method: str, backend: str):
        super().__init__()
        if method not in METHODS:
            raise ValueError(f"parallelism.context_parallel_method = {method!r}: valid values are "
                             f"{list(METHODS)}")
        self.group, self.method, self.backend = group, method, backend

    # P2P communication inside an autograd.Function does not trace: run eagerly under compile.
    @torch._dynamo.disable
    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        if q.shape[1] % 2 != 0 or k.shape[1] != q.shape[1]:
            raise ValueError(
                f"context parallel attention needs equal, even local lengths (two chunks per "
                f"rank); got q {tuple(q.shape)}, k {tuple(k.shape)}"
            )
        fn = _RingAttention if self.method == "ring" else _AllGatherAttention
        return fn.apply(q, k, v, doc_ids, self.group, self.backend)

    def extra_repr(self) -> str:
        return f"method={self.method}, backend={self.backend}, cp={dist.get_world_size(self.group)}"


def apply_cp(model: nn.Module, cp_mesh, method: str) -> nn.Module:
    """Replace every block's `attention.core` by a ContextParallelAttention over `cp_mesh`, keeping
    the kernels.attention backend the model's core was built with (its `backend` attribute)."""
    if method not in METHODS:
        raise ValueError(f"parallelism.context_parallel_method = {method!r}: valid values are "
                         f"{list(METHODS)}")
    group = cp_mesh.get_group()
    backends = set()
    for name, block in model.layers.items():
        core = block.attention.core
        if not isinstance(getattr(core, "backend", None), str):
            raise ValueError(f"context parallelism: layers.{name}.attention.core "
                             f"({type(core).__name__}) has no `backend` attribute naming its "
                             "kernels.attention backend")
        backends.add(core.backend)
        block.attention.core = ContextParallelAttention(group, method, core.backend)
    logger.info(
        "Applied context parallelism (%s) over cp=%d to %d blocks, attention backend %s, causal "
        "load balancing (rank r holds chunks r and 2cp-1-r)",
        method, cp_mesh.size(), len(model.layers), "/".join(sorted(backends)),
    )
    return model
