"""Expert parallelism (EP): each rank holds n_experts / ep experts and tokens travel to them.

Mesh. Every token is routed on exactly one rank (TP's sequence parallelism and CP shard tokens), so
the MoE FFN is data parallel over all dp_shard x cp x tp ranks of a replica. EP takes its ranks from
those n = dp_shard x cp x tp ranks: `build_moe_meshes` makes two more DeviceMeshes over the world,
["dp_replicate", "dp_mod_ep", "ep"] of shape (dp_replicate, n / ep, ep), in the main mesh's rank
order, so an EP group is ep consecutive ranks (one node, for all-to-all over NVLink), and a mesh
["dp_replicate", "moe_dp"] of shape (dp_replicate, n) (all n ranks of a replica) for the rest of the
MoE. The main mesh is unchanged.

Weights. Expert parameters (E, ., .) become DTensors Shard(0) on "ep"; FSDP then shards them over
"dp_mod_ep" (trainer/parallel/moe.py). The GEMMs use the local (E/ep, ., .) shard (`LocalShard`).

Dispatch and combine (`AllToAllDispatcher`, replacing the MoE's LocalDispatcher). Rows arrive
sorted by global expert e (rank e // (E/ep) owns e), so:
  1. counts (E,) are exchanged with one all_to_all_single: recv[r, j] = rows rank r sends to my
     local expert j; the split sizes go to the host (one wait per layer and direction, on an event
     recorded before the shared experts' kernels, which keep the GPU busy meanwhile);
  2. rows are exchanged with an autograd-aware all_to_all_single (its backward is the reverse
     all-to-all), arriving ordered (source rank, local expert);
  3. a stable local sort groups them by local expert for the grouped GEMM, then is undone;
  4. the outputs take the reverse all-to-all back to where the rows came from.
Experts that receive no rows (on any rank) are empty groups: nothing special happens.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn
from torch.distributed.device_mesh import DeviceMesh, init_device_mesh
from torch.distributed.tensor import DTensor, Shard, distribute_tensor

from trainer.models.moe import gather_rows, group_rows, scatter_rows
from trainer.parallel.dims import ParallelDims

logger = logging.getLogger("titankit")

@dataclass
class MoEMeshes:
    experts: DeviceMesh
    """["dp_replicate", "dp_mod_ep", "ep"]: EP over "ep", FSDP of the experts over the rest."""
    dp: DeviceMesh
    """["dp_replicate", "moe_dp"]: the MoE's data parallelism (every rank that routes tokens)."""


def build_moe_meshes(dims: ParallelDims, device_type: str) -> MoEMeshes:
    """The two MoE meshes over the world's ranks (a collective: every rank must call it)."""
    n = dims.dp_shard * dims.cp * dims.tp
    if n % dims.ep != 0:
        raise ValueError(
            f"parallelism.expert_parallel_degree = {dims.ep} must divide data_parallel_shard_degree x "
            f"context_parallel_degree x tensor_parallel_degree = {dims.dp_shard} x {dims.cp} x "
            f"{dims.tp} = {n} (the ranks that route tokens within one replica)"
        )
    r = dims.dp_replicate
    experts = init_device_mesh(device_type, (r, n // dims.ep, dims.ep),
                               mesh_dim_names=("dp_replicate", "dp_mod_ep", "ep"))
    dp = init_device_mesh(device_type, (r, n), mesh_dim_names=("dp_replicate", "moe_dp"))
    return MoEMeshes(experts=experts, dp=dp)


class _AllToAll(torch.autograd.Function):
    """Rows (sum(in_splits), ...) -> (sum(out_splits), ...); backward: the reverse exchange."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
        ctx.group, ctx.out_splits, ctx.in_splits = group, out_splits, in_splits
        out = x.new_empty((sum(out_splits),) + tuple(x.shape[1:]))
        dist.all_to_all_single(out, x.contiguous(), out_splits, in_splits, group=group)
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        out = grad.new_empty((sum(ctx.in_splits),) + tuple(grad.shape[1:]))
        dist.all_to_all_single(out, grad.contiguous(), ctx.in_splits, ctx.out_splits, group=ctx.group)
        return out, None, None, None


def all_to_all(x: torch.Tensor, out_splits: list[int], in_splits: list[int], group) -> torch.Tensor:
    """Differentiable all_to_all_single: rank r receives out_splits[s] rows from each rank s."""
    return _AllToAll.apply(x, out_splits, in_splits, group)


class LocalShard(nn.Module):
    """Replaces GroupedExperts.weight_view: the GEMMs use this rank's (E/ep, ., .) experts. The
    gradient comes back as a Shard(0) DTensor: each expert's gradient lives on its owner only.
    compute_dtype: set when no FSDP unit casts the experts (one owner per expert, see
    trainer/parallel/moe.py); the cast's backward returns the gradient in the parameter's dtype."""

    def __init__(self) -> None:
        super().__init__()
        self.compute_dtype: torch.dtype | None = None

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        w = w.to_local() if isinstance(w, DTensor) else w
        return w if self.compute_dtype is None else w.to(self.compute_dtype)


@dataclass
class _Exchanged:
    counts: torch.Tensor  # held, so no other tensor can take its memory while this is pending
    recv: torch.Tensor  # (ep, E / ep): recv[r, j] = rows from rank r for local expert j
    splits: torch.Tensor  # (2, ep) [rows sent to, rows received from] each rank; on the host on CUDA
    ready: torch.cuda.Event | None  # recorded after the copy of `splits` to the host


class AllToAllDispatcher(nn.Module):
    """Replaces MoE.dispatcher: sends expert-sorted rows to the experts' owners and back.

    prepare(counts) exchanges the counts and starts copying the split sizes to pinned host memory;
    forward() waits for that copy only (a CUDA event), not for the work the caller queued in between.
    Both run eagerly under torch.compile (host-side split sizes)."""

    def __init__(self, group: dist.ProcessGroup, n_experts: int) -> None:
        super().__init__()
        self.group = group
        self.ep = dist.get_world_size(group)
        self.n_experts = n_experts
        self._pending: _Exchanged | None = None

    def _exchange(self, counts: torch.Tensor) -> _Exchanged:
        ep, e_loc = self.ep, self.n_experts // self.ep
        recv = torch.empty_like(counts)
        dist.all_to_all_single(recv, counts.contiguous(), group=self.group)
        recv = recv.view(ep, e_loc)
        splits = torch.stack([counts.view(ep, e_loc).sum(1), recv.sum(1)])
        ready = None
        if splits.is_cuda:
            host = torch.empty(splits.shape, dtype=splits.dtype, pin_memory=True)
            host.copy_(splits, non_blocking=True)
            ready = torch.cuda.Event()
            ready.record()
            splits = host
        return _Exchanged(counts, recv, splits, ready)

    @torch._dynamo.disable
    def prepare(self, counts: torch.Tensor) -> None:
        self._pending = self._exchange(counts)

    @torch._dynamo.disable
    def forward(self, x: torch.Tensor, counts: torch.Tensor, experts: nn.Module) -> torch.Tensor:
        """x (n, D) sorted by global expert, counts (E,) int64 -> expert outputs (n, D), same order."""
        ep, e_loc = self.ep, self.n_experts // self.ep
        ex, self._pending = self._pending, None
        if ex is None or ex.counts.data_ptr() != counts.data_ptr() or ex.counts.shape != counts.shape:
            # Not prepared for these counts; the same on every rank (it depends on the code path only).
            ex = self._exchange(counts)
        if ex.ready is not None:
            ex.ready.synchronize()
        in_splits, out_splits = ex.splits.tolist()
        recv = ex.recv
        m = sum(out_splits)
        rows = all_to_all(x, out_splits, in_splits, self.group)  # ordered (source rank, local expert)
        local_ids = torch.repeat_interleave(
            torch.arange(e_loc, device=x.device).repeat(ep), recv.flatten(), output_size=m)
        dest, order, local_counts = group_rows(local_ids, e_loc)
        y = gather_rows(experts(scatter_rows(rows, dest, m, order), local_counts), dest, order)
        return all_to_all(y, in_splits, out_splits, self.group)

    def extra_repr(self) -> str:
        return f"ep={self.ep}, n_experts={self.n_experts}"


def apply_ep(model: nn.Module, experts_mesh: DeviceMesh) -> nn.Module:
    """Shard every MoE layer's experts over experts_mesh["ep"] (Shard(0)) and swap in the all-to-all
    dispatcher. `model` is a MoETransformer, still on meta (no communication happens here)."""
    ep_mesh = experts_mesh["ep"]
    ep = ep_mesh.size()
    layers = model.moe_layers()
    for layer_id, moe in layers:
        if moe.n_experts % ep != 0:
            raise ValueError(
                f"parallelism.expert_parallel_degree = {ep} must divide the model's n_experts = "
                f"{moe.n_experts} (layer {layer_id}); valid degrees divide {moe.n_experts}"
            )
        experts = moe.experts
        for name, param in list(experts.named_parameters(recurse=False)):
            # src_data_rank=None: every rank slices its own copy (meta here), no communication.
            dt = distribute_tensor(param.data, ep_mesh, [Shard(0)], src_data_rank=None)
            experts.register_parameter(name, nn.Parameter(dt, requires_grad=param.requires_grad))
        experts.weight_view = LocalShard()
        moe.dispatcher = AllToAllDispatcher(ep_mesh.get_group(), moe.n_experts)
    n_experts = layers[0][1].n_experts if layers else 0
    logger.info(
        "Applied expert parallelism over ep=%d to %d MoE layers: %d of %d experts per rank, token "
        "dispatch/combine by all-to-all (dp_mod_ep=%d)",
        ep, len(layers), n_experts // ep, n_experts, experts_mesh["dp_mod_ep"].size(),
    )
    return model
