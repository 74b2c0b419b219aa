"""Context parallelism (CP) written on the attention_fwd / attention_bwd contract.

The sequence of every sample is cut into 2 x cp chunks; CP rank r holds chunks r and 2cp-1-r
("causal load balancing": every rank gets one early and one late chunk, so the causal work is
even). Everything but attention is token-local, so only `attention.core` of each block is replaced
(by `ContextParallelAttention`); the model code is untouched. Two methods:

ring       K/V blocks travel around the CP group with P2P send/recv, each transfer posted before
           the compute on the block at hand; each rank merges the partial attention over each
           block by its log-sum-exp (Liu et al. 2023, "Ring Attention"). The backward runs the ring
           again with the GLOBAL out/lse, so each block's gradient share is exact, and sends each
           share of dK/dV straight back to the block's owner, hidden behind the local work.
allgather  K/V are all-gathered over CP, each local query chunk attends to exactly the prefix it
           may see (Llama 3 paper, section 3.3.2); the backward reduce-scatters fp32 dK/dV to their
           owners. The diagonal blocks need only local K/V, so they are computed while the
           all-gather (forward, backward) and the reduce-scatter (backward) are in flight.

Only visible block pairs are computed, the diagonal ones with the backend's causal kernel, and each
rank does the same 4c^2 query-key pairs per call (c the chunk length).

Both methods are torch custom ops (titankit::cp_attention_fwd / _bwd, with the communication
inside), so a compiled block stays one graph: no graph break per block, activation checkpointing's
per-op policy keeps the CP output (titankit::*attention_fwd ops are saved) instead of rerunning the
ring during recomputation, and inductor fuses what surrounds attention. (With the former
torch._dynamo.disable'd autograd.Function, a selectively checkpointed compiled block could not be
traced at all and ran entirely eagerly.) Every rank runs the same graph, so the collectives inside
the opaque op are issued in the same order everywhere.

Both work with every backend of kernels.attention, on CPU (gloo) and CUDA (nccl). Partial outputs
are merged and dQ/dK/dV accumulated in fp32. The ring sends each dK/dV share as the kernel returned
it (bf16 in training: exact, since the owner sums the shares in fp32); the all-gather variant's
reduce-scatter runs in fp32 (a rank's prefix parts overlap, so its partial is already a sum).
Document masks: each rank's doc ids (B, S) are all-gathered per call (tiny).
Under TP each TP rank runs its own CP ring over its local heads.
Shapes: q (B, S, Hq, D), k and v (B, S, Hkv, D), S = 2c the local sequence, c the chunk length.
"""

from __future__ import annotations

import logging

import torch
import torch.distributed as dist
from torch import nn

from kernels.attention import attention_bwd, attention_fwd, merge_partials
from trainer.parallel.collectives import all_gather_single, reduce_scatter_single

logger = logging.getLogger("titankit")

METHODS = ("ring", "allgather")
SEQ_KEYS = ("tokens", "labels", "positions", "doc_ids")

# Custom ops take strings, not process groups: ContextParallelAttention registers its group here.
_GROUPS: dict[str, dist.ProcessGroup] = {}


def _gather_start(x: torch.Tensor, group) -> tuple[torch.Tensor, object]:
    """Async all-gather of x (n0, ...) -> ((cp, n0, ...) buffer, work); wait before reading."""
    cp = dist.get_world_size(group)
    out = torch.empty((cp * x.shape[0],) + tuple(x.shape[1:]), dtype=x.dtype, device=x.device)
    work = all_gather_single(out, x.contiguous(), group=group, async_op=True)
    return out.view((cp,) + tuple(x.shape)), work


def _all_gather_stacked(x: torch.Tensor, group) -> torch.Tensor:
    """x (n0, ...) from every rank -> (cp, n0, ...); gloo wants the output concatenated on dim 0."""
    out, work = _gather_start(x, group)
    work.wait()
    return out


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


def _wait(works) -> None:
    for w in works if isinstance(works, list) else [works]:
        w.wait()


def _doc_all(doc: torch.Tensor | None, group) -> torch.Tensor | None:
    """All CP ranks' local doc ids (B, S) -> (cp, B, S); tiny, gathered once per call."""
    if doc is None:
        return None
    return _all_gather_stacked(doc, group)


def _sub(doc: torch.Tensor | None, rows: slice) -> torch.Tensor | None:
    return None if doc is None else doc[:, rows]


def _rows(t: torch.Tensor, rows: slice, dim: int = 1) -> torch.Tensor:
    """A contiguous slice along `dim` (no copy when it already is one)."""
    return t.narrow(dim, rows.start, rows.stop - rows.start).contiguous()


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


def _ring_fwd(q, k, v, doc, group, backend) -> tuple[torch.Tensor, torch.Tensor]:
    ring = _Ring(group)
    r, cp = ring.rank, ring.size
    c = q.shape[1] // 2
    docs = _doc_all(doc, group)
    kv = torch.stack([k, v])  # (2, B, S, Hkv, D): one message per step
    acc_out = acc_lse = None
    for j in range(cp):
        s = (r - j) % cp
        if j < cp - 1:  # the next block travels while this one is computed
            nxt, works = ring.start(kv)
        qr, kr, causal = _ring_pair(r, s, c)
        out, lse = attention_fwd(
            _rows(q, qr), _rows(kv[0], kr), _rows(kv[1], kr), causal=causal,
            q_doc=_sub(doc, qr), kv_doc=None if docs is None else docs[s][:, kr], backend=backend,
        )
        if acc_out is None:  # step 0 covers every query row
            # Contiguous fp32 copies: merged in place, and the op's outputs must match its fake.
            acc_out = out.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
            acc_lse = lse.to(torch.float32, memory_format=torch.contiguous_format, copy=True)
        else:
            _f32_merge(acc_out, acc_lse, out, lse, qr)
        if j < cp - 1:
            _wait(works)
            kv = nxt
    return acc_out.to(q.dtype), acc_lse


def _ring_bwd(dout, q, k, v, out, lse, doc, group, backend):
    """Ring backward with every transfer hidden behind compute (dK/dV returned to their owners).

    Order: local chunk r's causal square (hides the first K/V transfer); then each remote block
    s = r-1, r-2, ... as it arrives, whose dK/dV share goes straight back to its owner s, while
    rank r+j's share of our block comes in; last the local chunk 2cp-1-r against both local chunks
    (bottom-right causal), which hides those dK/dV transfers. A share is one kernel's output, sent
    in its own dtype: exact, and half the bytes of an fp32 accumulator; the owner sums in fp32.
    """
    ring = _Ring(group)
    r, cp = ring.rank, ring.size
    c = q.shape[1] // 2
    docs = _doc_all(doc, group)
    dout, out, lse = dout.contiguous(), out.contiguous(), lse.contiguous()
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dkv = torch.zeros((2,) + tuple(k.shape), dtype=torch.float32, device=k.device)  # own block

    def pair(qr: slice, kv_blk: torch.Tensor, kr: slice, causal: bool, kv_doc):
        dq_p, dk_p, dv_p = attention_bwd(
            _rows(dout, qr), _rows(q, qr), _rows(kv_blk[0], kr), _rows(kv_blk[1], kr),
            _rows(out, qr), _rows(lse, qr, dim=2), causal=causal, q_doc=_sub(doc, qr),
            kv_doc=kv_doc, backend=backend)
        dq[:, qr] += dq_p
        return torch.stack([dk_p.to(k.dtype), dv_p.to(k.dtype)])  # (2, B, n, Hkv, D)

    local = torch.stack([k, v])
    kv, works = local, []
    if cp > 1:
        nxt, works = ring.start(kv)
    first, second, both = slice(0, c), slice(c, 2 * c), slice(0, 2 * c)
    dkv[:, :, first] += pair(first, local, first, True, _sub(doc, first))
    incoming = []
    for j in range(1, cp):
        s, t = (r - j) % cp, (r + j) % cp
        _wait(works)
        kv = nxt
        if j < cp - 1:  # forward the block we just got while computing on it
            nxt, works = ring.start(kv)
        qr, kr, _ = _ring_pair(r, s, c)
        share = pair(qr, kv, kr, False, None if docs is None else docs[s][:, kr])
        # Rank t computed its pair with our block at this step: those rows of our dK/dV.
        rows = _ring_pair(t, r, c)[1]
        buf = torch.empty((2, k.shape[0], rows.stop - rows.start) + tuple(k.shape[2:]),
                          dtype=k.dtype, device=k.device)
        ops = [dist.P2POp(dist.isend, share, dist.get_global_rank(group, s), group),
               dist.P2POp(dist.irecv, buf, dist.get_global_rank(group, t), group)]
        incoming.append((buf, rows, dist.batch_isend_irecv(ops)))
    dkv += pair(second, local, both, True, doc)  # bottom-right causal: Sq = c, Skv = 2c
    for buf, rows, w in incoming:
        _wait(w)
        dkv[:, :, rows] += buf
    return dq.to(q.dtype), dkv[0].to(k.dtype, copy=True), dkv[1].to(v.dtype, copy=True)


# ----------------------------------------------------------------------------- all-gather KV


def _global_prefix(allx: torch.Tensor, n_chunks: int, c: int) -> torch.Tensor:
    """(cp, n, B, 2c, H, D) gathered local shards -> the first n_chunks global chunks
    (n, B, n_chunks * c, H, D). Global chunk j is the first half of rank j's shard for j < cp and
    the second half of rank 2cp-1-j's shard otherwise."""
    cp = allx.shape[0]
    parts = [allx[j, :, :, :c] if j < cp else allx[2 * cp - 1 - j, :, :, c:]
             for j in range(n_chunks)]
    return torch.cat(parts, dim=2)


def _scatter_start(g: torch.Tensor, group) -> tuple[torch.Tensor, object]:
    """Async reduce-scatter of global-order g (n, B, 2c*cp, H, D), summed over ranks, to the
    load-balanced owners: returns ((n, B, 2c, H, D) buffer, work)."""
    cp = dist.get_world_size(group)
    c = g.shape[2] // (2 * cp)
    chunks = g.split(c, dim=2)
    per_rank = torch.cat([torch.cat([chunks[s], chunks[2 * cp - 1 - s]], dim=2)
                          for s in range(cp)])  # (cp * n, B, 2c, H, D), rank-major
    out = torch.empty((g.shape[0],) + tuple(per_rank.shape[1:]), dtype=g.dtype, device=g.device)
    work = reduce_scatter_single(out, per_rank, group=group, async_op=True)
    return out, work


def _ag_blocks(rank: int, cp: int, c: int) -> list[tuple[slice, int]]:
    """For each local query chunk: (query rows, global chunk index g).

    Chunk g sees keys [0, (g+1)c): keys [0, g*c) with no mask (the prefix, from the gathered
    K/V) and its own chunk with a causal diagonal (Sq == Skv, so every backend's fused path
    applies), which is local.
    """
    return [(slice(0, c), rank), (slice(c, 2 * c), 2 * cp - 1 - rank)]


def _global_doc(doc: torch.Tensor | None, group, n_chunks: int, c: int) -> torch.Tensor | None:
    if doc is None:
        return None
    alld = _all_gather_stacked(doc, group)  # (cp, B, 2c)
    return _global_prefix(alld.view(alld.shape[0], 1, *doc.shape, 1, 1), n_chunks, c).view(
        doc.shape[0], -1)


def _allgather_fwd(q, k, v, doc, group, backend) -> tuple[torch.Tensor, torch.Tensor]:
    rank, cp = dist.get_rank(group), dist.get_world_size(group)
    c = q.shape[1] // 2
    blocks = _ag_blocks(rank, cp, c)
    n_pre = max(g for _, g in blocks)  # the longest prefix any local chunk needs, in chunks
    allkv, work = _gather_start(torch.stack([k, v]), group)  # (cp, 2, B, 2c, Hkv, D)
    gdoc = _global_doc(doc, group, n_pre, c)
    # Diagonals first: local K/V only, computed while the all-gather is in flight.
    diag = [attention_fwd(_rows(q, qr), _rows(k, qr), _rows(v, qr), causal=True,
                          q_doc=_sub(doc, qr), kv_doc=_sub(doc, qr), backend=backend)
            for qr, _ in blocks]
    work.wait()
    kv = _global_prefix(allkv, n_pre, c)  # (2, B, n_pre * c, Hkv, D)
    out = torch.empty(q.shape, dtype=torch.float32, device=q.device)
    lse = torch.empty((q.shape[0], q.shape[2], q.shape[1]), dtype=torch.float32, device=q.device)
    for (qr, g), (o, l) in zip(blocks, diag):
        if g > 0:
            pre = slice(0, g * c)
            o_p, l_p = attention_fwd(_rows(q, qr), _rows(kv[0], pre), _rows(kv[1], pre),
                                     causal=False, q_doc=_sub(doc, qr), kv_doc=_sub(gdoc, pre),
                                     backend=backend)
            o, l = merge_partials(o, l, o_p, l_p)
        out[:, qr] = o
        lse[:, :, qr] = l
    return out.to(q.dtype), lse


def _allgather_bwd(dout, q, k, v, out, lse, doc, group, backend):
    rank, cp = dist.get_rank(group), dist.get_world_size(group)
    c = q.shape[1] // 2
    blocks = _ag_blocks(rank, cp, c)
    n_pre = max(g for _, g in blocks)
    allkv, work = _gather_start(torch.stack([k, v]), group)
    gdoc = _global_doc(doc, group, n_pre, c)
    dout, out, lse = dout.contiguous(), out.contiguous(), lse.contiguous()
    dq = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    dkv_local = torch.zeros((2,) + tuple(k.shape), dtype=torch.float32, device=k.device)

    def diagonal(qr: slice) -> None:
        dq_p, dk_p, dv_p = attention_bwd(
            _rows(dout, qr), _rows(q, qr), _rows(k, qr), _rows(v, qr), _rows(out, qr),
            _rows(lse, qr, dim=2), causal=True, q_doc=_sub(doc, qr), kv_doc=_sub(doc, qr),
            backend=backend)
        dq[:, qr] += dq_p
        dkv_local[0, :, qr] += dk_p
        dkv_local[1, :, qr] += dv_p

    # Overlap: diagonal A during the all-gather, diagonal B during the reduce-scatter.
    diagonal(blocks[0][0])
    work.wait()
    kv = _global_prefix(allkv, n_pre, c)
    dkv_global = torch.zeros((2, k.shape[0], 2 * cp * c) + tuple(k.shape[2:]),
                             dtype=torch.float32, device=k.device)
    for qr, g in blocks:
        if g == 0:
            continue
        pre = slice(0, g * c)
        dq_p, dk_p, dv_p = attention_bwd(
            _rows(dout, qr), _rows(q, qr), _rows(kv[0], pre), _rows(kv[1], pre), _rows(out, qr),
            _rows(lse, qr, dim=2), causal=False, q_doc=_sub(doc, qr), kv_doc=_sub(gdoc, pre),
            backend=backend)
        dq[:, qr] += dq_p
        dkv_global[0, :, pre] += dk_p
        dkv_global[1, :, pre] += dv_p
    dkv, work = _scatter_start(dkv_global, group)  # (2, B, 2c, Hkv, D), summed over every rank
    diagonal(blocks[1][0])
    work.wait()
    dkv += dkv_local
    return dq.to(q.dtype), dkv[0].to(k.dtype, copy=True), dkv[1].to(v.dtype, copy=True)


# ----------------------------------------------------------------------------- custom ops


def _group(name: str) -> dist.ProcessGroup:
    if name not in _GROUPS:
        raise ValueError(f"context parallel attention: process group {name!r} was never "
                         "registered (build the module with ContextParallelAttention)")
    return _GROUPS[name]


@torch.library.custom_op("titankit::cp_attention_fwd", mutates_args=())
def cp_attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    doc_ids: torch.Tensor | None,
    group_name: str,
    method: str,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, S, Hq, D) in q's dtype, lse (B, Hq, S) float32) of CP attention on local shards."""
    fn = _ring_fwd if method == "ring" else _allgather_fwd
    return fn(q, k, v, doc_ids, _group(group_name), backend)


@cp_attention_fwd.register_fake
def _(q, k, v, doc_ids, group_name, method, backend):
    b, s, h, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, h, s), dtype=torch.float32)


@torch.library.custom_op("titankit::cp_attention_bwd", mutates_args=())
def cp_attention_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    doc_ids: torch.Tensor | None,
    group_name: str,
    method: str,
    backend: str,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) of CP attention given the global out/lse that cp_attention_fwd returned."""
    fn = _ring_bwd if method == "ring" else _allgather_bwd
    return fn(dout, q, k, v, out, lse, doc_ids, _group(group_name), backend)


@cp_attention_bwd.register_fake
def _(dout, q, k, v, out, lse, doc_ids, group_name, method, backend):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, doc_ids, group_name, method, backend = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse, doc_ids)
    ctx.args = (group_name, method, backend)
    ctx.mark_non_differentiable(lse)


def _backward(ctx, dout, _dlse):
    q, k, v, out, lse, doc_ids = ctx.saved_tensors
    dq, dk, dv = torch.ops.titankit.cp_attention_bwd(dout, q, k, v, out, lse, doc_ids, *ctx.args)
    return dq, dk, dv, None, None, None, None


cp_attention_fwd.register_autograd(_backward, setup_context=_setup_context)


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
        self.group_name = group.group_name
        _GROUPS[self.group_name] = group

    def forward(self, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                doc_ids: torch.Tensor | None = None) -> torch.Tensor:
        if q.shape[1] % 2 != 0 or k.shape[1] != q.shape[1]:
            raise ValueError(
                f"context parallel attention needs equal, even local lengths (two chunks per "
                f"rank); got q {tuple(q.shape)}, k {tuple(k.shape)}"
            )
        out, _ = torch.ops.titankit.cp_attention_fwd(q, k, v, doc_ids, self.group_name,
                                                      self.method, self.backend)
        return out

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
        "load balancing (rank r holds chunks r and 2cp-1-r), as custom op "
        "titankit::cp_attention_fwd (no graph break under compile)",
        method, cp_mesh.size(), len(model.layers), "/".join(sorted(backends)),
    )
    return model
