"""Mixture-of-experts Llama-3: the dense blocks of llama.py with MoE FFNs in chosen layers.

Single-device PyTorch; parallelism is applied from outside (trainer/parallel/moe.py). MoE block:
    h = x + attention(attention_norm(x));  out = h + moe(ffn_norm(h))
moe(x), tokens T = B*S, experts E, top-k K, width D:
    router:   scores (T, E) = softmax or sigmoid(x W_r^T) in fp32; experts chosen by top-k of
              scores + expert_bias (the bias only selects: DeepSeek-V3, arXiv:2412.19437 2.1.2);
              weights = chosen scores (optionally renormalised to sum 1), x route_scale
    permute:  the T*K (token, choice) rows are sorted by expert (stable, so deterministic); experts
              with no rows are fine everywhere (empty groups of the grouped GEMM)
    experts:  dispatcher(rows, counts, experts): locally just experts(rows, counts), a SwiGLU per
              expert through one grouped GEMM (kernels.moe); expert parallelism replaces the
              dispatcher by an all-to-all one (trainer/parallel/expert.py)
    combine:  rows back to (T, K, D), weighted sum over K, plus the shared experts' SwiGLU of x.
Dropless: every token reaches all of its K experts (no capacity factor).

Load balancing:
  aux loss  Switch Transformer's E * sum_e f_e P_e (arXiv:2101.03961 eq. 4) over the GLOBAL
            micro-batch: f_e = share of routed slots going to e, P_e = mean router probability of e.
            Added to the trainer's loss through AuxLossGrad (identity on the routing weights; in
            backward it feeds coef / micro-batches into the aux loss), exactly as if
            coef * mean_over_microbatches(sum_layers aux) had been added to the loss.
  bias      `post_optimizer_step()` moves expert_bias by rate * sign(mean load - load) from the
            token counts of the step (DeepSeek-V3's auxiliary-loss-free balancing).
Both need global counts: `reduce_counts` (identity here) is replaced from outside by a sum over
every rank that routes tokens, so the update is identical on all ranks.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Callable

import torch
import torch.nn as nn
import torch.nn.functional as F

import kernels.moe
from trainer.models.llama import (
    Attention,
    FeedForward,
    Llama,
    RMSNorm,
    TransformerBlock,
    canonical_fqn,
)
from trainer.models.moe_args import MOE_FLAVORS, MoEArgs  # noqa: F401  (MOE_FLAVORS re-exported)
from trainer.models.rope import rope_table

logger = logging.getLogger("titankit")

# ----------------------------------------------------------------------------- row permutations


# Gathers (y[idx] with one index tensor on dim 0) run as a vectorized row copy on CUDA; scatters
# (out[idx] = x) run element by element and need a zeroed output. On 2 x H200 (moe_16b, EP 2) the
# element-wise index kernel (99 calls per step, as many as there are scatters) took 43.6 ms of a
# 462 ms step, the vectorized gathers 20.2 ms for 100 calls. So wherever the
# rows are only reordered (dest a permutation of 0..n-1), both directions are gathers: with
# order = the inverse of dest, scattering to dest is gathering from order.


class _ScatterRows(torch.autograd.Function):
    """out (size, D): out[dest] = x, zeros elsewhere (dest distinct); as a gather from `order` when
    given (then size == n and dest is a permutation). The backward is a gather either way."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dest: torch.Tensor, size: int, order: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(dest)
        if order is not None:
            return x[order]
        out = x.new_zeros((size,) + tuple(x.shape[1:]))
        out[dest] = x
        return out

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (dest,) = ctx.saved_tensors
        return grad[dest], None, None, None


class _GatherRows(torch.autograd.Function):
    """out = y[dest] for distinct dest; the backward scatters into zeros (rows not read get 0), or
    gathers from `order` when given (dest a permutation: every row is read once)."""

    @staticmethod
    def forward(ctx, y: torch.Tensor, dest: torch.Tensor, order: torch.Tensor | None) -> torch.Tensor:
        ctx.save_for_backward(dest, order)
        ctx.size = y.shape[0]
        return y[dest]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        dest, order = ctx.saved_tensors
        if order is not None:
            return grad[order], None, None
        out = grad.new_zeros((ctx.size,) + tuple(grad.shape[1:]))
        out[dest] = grad
        return out, None, None


class _TokensToRows(torch.autograd.Function):
    """x (T, D) -> rows (T*K, D) in expert order: rows[p] = x[order[p] // K], one gather (no (T, K, D)
    expanded copy). Backward: each token sums the gradients of its K rows (a gather and a sum, no
    atomics: deterministic)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, dest: torch.Tensor, order: torch.Tensor, k: int) -> torch.Tensor:
        ctx.save_for_backward(dest)
        ctx.k = k
        return x[order // k]

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        (dest,) = ctx.saved_tensors
        t = dest.shape[0] // ctx.k
        return grad[dest].view(t, ctx.k, *grad.shape[1:]).sum(1), None, None, None


def scatter_rows(x: torch.Tensor, dest: torch.Tensor, size: int,
                 order: torch.Tensor | None = None) -> torch.Tensor:
    """x (n, ...) -> (size, ...) with row i of x at row dest[i] (dest distinct), zeros elsewhere.
    Pass order (the inverse permutation, from group_rows) when size == n: then it is a gather."""
    if order is not None and size != x.shape[0]:
        raise ValueError(f"scatter_rows: order is only for permutations (size {size} != rows {x.shape[0]})")
    return _ScatterRows.apply(x, dest, size, order)


def gather_rows(y: torch.Tensor, dest: torch.Tensor, order: torch.Tensor | None = None) -> torch.Tensor:
    """y (size, ...) -> y[dest] (n, ...); the inverse of scatter_rows with the same dest (and order)."""
    if order is not None and y.shape[0] != dest.shape[0]:
        raise ValueError(f"gather_rows: order is only for permutations (rows {y.shape[0]} != {dest.shape[0]})")
    return _GatherRows.apply(y, dest, order)


def tokens_to_rows(x: torch.Tensor, dest: torch.Tensor, order: torch.Tensor, k: int) -> torch.Tensor:
    """x (T, D) -> (T*K, D): row t*K + j (token t's j-th choice) moved to position dest[t*K + j]."""
    return _TokensToRows.apply(x, dest, order, k)


def group_rows(ids: torch.Tensor, n_groups: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """Stable sort of rows by group id. ids (n,) int64 in [0, n_groups) -> (dest (n,): position of
    each row in the sorted order, order (n,): the row at each position (dest's inverse), counts
    (n_groups,) int64)."""
    order = torch.argsort(ids, stable=True)
    bounds = torch.searchsorted(ids[order], torch.arange(n_groups + 1, device=ids.device))
    dest = torch.empty_like(order).scatter_(0, order, torch.arange(ids.shape[0], device=ids.device))
    return dest, order, bounds.diff()


def pad_groups(counts: torch.Tensor, n_rows: int, align: int) -> tuple[torch.Tensor, torch.Tensor, int]:
    """Spread n_rows rows grouped by `counts` (G,) so every group starts on a multiple of `align`.

    Returns (dest (n_rows,) new position of each row, offs (G,) int32 cumulative ends, size): size is
    a bound known without reading counts on the host (no sync); the last group ends at `size`, its
    extra rows being zeros that contribute nothing."""
    g = counts.shape[0]
    ids = torch.repeat_interleave(torch.arange(g, device=counts.device), counts, output_size=n_rows)
    padded = (counts + align - 1) // align * align
    starts = counts.cumsum(0) - counts
    ends = padded.cumsum(0)
    dest = torch.arange(n_rows, device=counts.device) - starts[ids] + (ends - padded)[ids]
    size = (n_rows + g * (align - 1) + align - 1) // align * align
    ends[-1] = size
    return dest, ends.to(torch.int32), size


# ----------------------------------------------------------------------------- modules


class TokenChoiceRouter(nn.Module):
    """Scores every expert per token and picks each token's top-k."""

    def __init__(self, args: MoEArgs) -> None:
        super().__init__()
        self.top_k = args.top_k
        self.score_func = args.score_func
        self.route_norm = args.route_norm
        self.route_scale = args.route_scale
        self.weight = nn.Parameter(torch.empty(args.n_experts, args.dim))
        # Selection-only bias of aux-loss-free balancing: state (checkpointed), not a parameter.
        self.register_buffer("expert_bias", torch.zeros(args.n_experts, dtype=torch.float32))

    def forward(self, x: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """x (T, D) -> scores (T, E) fp32 (or wider), top_idx (T, K) int64, top_weights (T, K)."""
        logits = F.linear(x, self.weight)
        logits = logits.to(torch.promote_types(logits.dtype, torch.float32))
        scores = logits.softmax(-1) if self.score_func == "softmax" else logits.sigmoid()
        _, top_idx = torch.topk(scores.detach() + self.expert_bias, self.top_k, dim=-1)
        top_w = scores.gather(1, top_idx)
        if self.route_norm:
            top_w = top_w / (top_w.sum(-1, keepdim=True) + 1e-20)
        return scores, top_idx, top_w * self.route_scale


class WeightView(nn.Module):
    """Parameter-free: maps an expert parameter to the tensor the GEMMs use (identity here; expert
    parallelism swaps in one that returns the local shard of the DTensor)."""

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        return w


class GroupedExperts(nn.Module):
    """E SwiGLU experts, w1/w3 (E, H, D) and w2 (E, D, H) (nn.Linear's (out, in) per expert)."""

    def __init__(self, dim: int, hidden_dim: int, n_experts: int, backend: str) -> None:
        super().__init__()
        self.backend = backend
        self.w1 = nn.Parameter(torch.empty(n_experts, hidden_dim, dim))
        self.w2 = nn.Parameter(torch.empty(n_experts, dim, hidden_dim))
        self.w3 = nn.Parameter(torch.empty(n_experts, hidden_dim, dim))
        self.weight_view = WeightView()

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x (n, D) rows grouped by expert, counts (E_local,) int64 rows per expert -> (n, D)."""
        w1, w2, w3 = (self.weight_view(w) for w in (self.w1, self.w2, self.w3))

        def gmm(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
            return kernels.moe.grouped_mm(a, w.transpose(1, 2), offs, backend=self.backend)

        return grouped_swiglu(x, counts, kernels.moe.row_alignment(self.backend, x), gmm, w1, w2, w3)


def grouped_swiglu(x: torch.Tensor, counts: torch.Tensor, align: int, gmm: Callable,
                   w1: torch.Tensor, w2: torch.Tensor, w3: torch.Tensor) -> torch.Tensor:
    """SwiGLU experts over rows grouped by expert: x (n, D), counts (E,) -> (n, D).

    gmm(a, w, offs) is the grouped GEMM (offs (E,) int32 cumulative group ends); with align > 1
    every group is first padded to start on a multiple of `align` rows (zero rows, dropped after)."""
    n = x.shape[0]
    if align == 1:
        offs = counts.cumsum(0).to(torch.int32)
    else:
        dest, offs, size = pad_groups(counts, n, align)
        x = scatter_rows(x, dest, size)
    y = gmm(F.silu(gmm(x, w1, offs)) * gmm(x, w3, offs), w2, offs)
    return y if align == 1 else gather_rows(y, dest)


class LocalDispatcher(nn.Module):
    """Parameter-free: hands the expert-sorted rows to the experts; expert parallelism replaces it
    with an all-to-all dispatcher (trainer/parallel/expert.py)."""

    def prepare(self, counts: torch.Tensor) -> None:
        """Called with the counts before forward(rows, counts, ...): nothing to start locally."""

    def forward(self, x: torch.Tensor, counts: torch.Tensor, experts: nn.Module) -> torch.Tensor:
        """x (n, D) grouped by expert, counts (E,) -> experts' output (n, D), same row order."""
        return experts(x, counts)


class AuxLossGrad(torch.autograd.Function):
    """Identity on `x`; its backward also sends `scale` as the gradient of the scalar `aux`, which
    is exactly what adding scale * aux to the loss does (the logits are untouched)."""

    @staticmethod
    def forward(ctx, x: torch.Tensor, aux: torch.Tensor, scale: float) -> torch.Tensor:
        ctx.scale = scale
        ctx.aux_meta = (aux.dtype, aux.device)
        return x.view_as(x)

    @staticmethod
    def backward(ctx, grad: torch.Tensor):
        dtype, device = ctx.aux_meta
        return grad, torch.full((), ctx.scale, dtype=dtype, device=device), None


def _identity(t: torch.Tensor) -> torch.Tensor:
    return t


class MoE(nn.Module):
    """Token-choice top-k MoE FFN with optional shared experts (see the module docstring)."""

    def __init__(self, args: MoEArgs) -> None:
        super().__init__()
        self.n_experts, self.top_k = args.n_experts, args.top_k
        self.score_func = args.score_func
        self.aux_loss_coef = args.aux_loss_coef
        self.bias_update_rate = args.bias_update_rate
        self.router = TokenChoiceRouter(args)
        self.experts = GroupedExperts(args.dim, args.moe_hidden_dim, args.n_experts, args.moe_backend)
        self.dispatcher = LocalDispatcher()
        self.shared_experts = (FeedForward(args.dim, args.n_shared_experts * args.moe_hidden_dim)
                               if args.n_shared_experts > 0 else None)
        # Set from outside (trainer/parallel/moe.py): sum of a tensor over every rank that routes
        # tokens, and the micro-batches per optimizer step (the aux loss is their mean).
        self.reduce_counts: Callable[[torch.Tensor], torch.Tensor] = _identity
        self.aux_loss_microbatches = 1
        # Local statistics since the last post_optimizer_step (not checkpointed).
        self.register_buffer("step_counts", torch.zeros(args.n_experts), persistent=False)
        self.register_buffer("step_aux", torch.zeros(()), persistent=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """x (B, S, D) -> (B, S, D)."""
        b, s, d = x.shape
        xt = x.reshape(-1, d)
        k = self.top_k
        scores, top_idx, top_w = self.router(xt)
        dest, order, counts = group_rows(top_idx.reshape(-1), self.n_experts)
        # Row t*K + j is token t's j-th choice; sorted by expert for the grouped GEMM.
        rows = tokens_to_rows(xt, dest, order, k)
        aux = None
        if self.aux_loss_coef > 0 and self.training and torch.is_grad_enabled():
            aux = self._aux_loss(scores, counts)
            # Any tensor on the path to the loss carries it; top_w (T, K) is the smallest.
            top_w = AuxLossGrad.apply(top_w, aux, self.aux_loss_coef / self.aux_loss_microbatches)
        # The shared experts go between prepare and dispatch: under expert parallelism the counts
        # are exchanged in prepare, and the host then waits for the split sizes with the shared
        # experts' kernels still queued, so the GPU does not run dry at every MoE layer.
        self.dispatcher.prepare(counts)
        shared = self.shared_experts(x) if self.shared_experts is not None else None
        y = gather_rows(self.dispatcher(rows, counts, self.experts), dest, order).view(b, s, k, d)
        # Shaped (B, S, ...) so the output is a new tensor, not a view (FSDP warns about views).
        out = (y * top_w.view(b, s, k, 1).to(y.dtype)).sum(2)
        if self.training:
            self._record(counts, aux)
        if shared is not None:
            out = out + shared
        return out

    def _aux_loss(self, scores: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """This rank's share of the global micro-batch's Switch loss (the shares sum to it)."""
        global_counts = self.reduce_counts(counts.float())  # (E,), no gradient
        n_tokens = (global_counts.sum() / self.top_k).clamp(min=1.0)
        f = global_counts / (n_tokens * self.top_k)
        # Probabilities: softmax scores as they are, sigmoid scores normalised per token.
        p = scores if self.score_func == "softmax" else scores / scores.sum(-1, keepdim=True)
        return self.n_experts * (f * (p.sum(0) / n_tokens)).sum()

    def _record(self, counts: torch.Tensor, aux: torch.Tensor | None) -> None:
        # An activation-checkpointing recompute runs forward again inside backward: count once.
        # (Under torch.compile the check is a graph break: this part runs eagerly.)
        if torch._C._current_graph_task_id() != -1:
            return
        with torch.no_grad():
            self.step_counts += counts.to(self.step_counts.dtype)
            if aux is not None:
                self.step_aux += aux.detach().float() / self.aux_loss_microbatches


class MoEBlock(nn.Module):
    """Llama-3 block whose FFN is an MoE (attribute `moe` instead of `feed_forward`)."""

    def __init__(self, layer_id: int, args: MoEArgs) -> None:
        super().__init__()
        self.layer_id = layer_id
        self.attention_norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.attention = Attention(args)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.moe = MoE(args)

    def forward(self, x: torch.Tensor, rope: torch.Tensor, doc_ids: torch.Tensor | None) -> torch.Tensor:
        h = x + self.attention(self.attention_norm(x), rope, doc_ids)
        return h + self.moe(self.ffn_norm(h))


_MOE_PARAM = re.compile(
    r"layers\.(\d+)\.moe\.(router\.weight|experts\.(w1|w2|w3)|shared_experts\.(w1|w2|w3)\.weight)"
)


class MoETransformer(Llama):
    """Llama-3 with MoE FFNs in layers >= n_dense_layers. Same contract as Llama (build on meta,
    parallelize, to_empty, init_weights), plus `post_optimizer_step()` and `metrics()`."""

    def __init__(self, args: MoEArgs) -> None:
        nn.Module.__init__(self)
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.register_buffer("rope_cache", rope_table(args), persistent=False)
        self.layers = nn.ModuleDict({
            str(i): MoEBlock(i, args) if args.is_moe_layer(i) else TransformerBlock(i, args)
            for i in range(args.n_layers)
        })
        self.norm = RMSNorm(args.dim, args.norm_eps, args.norm_backend)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)
        self.router_bias_updates = 0
        self._warned_no_updates = False
        self._reset_stats()

    def param_init_std(self, fqn: str) -> float | None:
        """Llama's rules, and for MoE layers: router 0.02, experts like the dense FFN (w1 0.02;
        w2, w3 0.02 / sqrt(2 (layer+1)))."""
        match = _MOE_PARAM.fullmatch(fqn)
        if match is None:
            return super().param_init_std(fqn)
        layer_id = int(match.group(1))
        name = match.group(3) or match.group(4)
        if name in ("w2", "w3"):
            return 0.02 / math.sqrt(2 * (layer_id + 1))
        return 0.02

    @torch.no_grad()
    def init_weights(self, init_fn=None, buffer_device: torch.device | str | None = None) -> None:
        super().init_weights(init_fn, buffer_device)
        for _, moe in self.moe_layers():
            moe.router.expert_bias.zero_()
            moe.step_counts.zero_()
            moe.step_aux.zero_()
        self._reset_stats()

    def moe_layers(self) -> list[tuple[int, MoE]]:
        """(layer id, MoE module) of every MoE layer, whatever wrappers AC/compile/FSDP added."""
        out = []
        for name, module in self.named_modules():
            if isinstance(module, MoE):
                out.append((int(canonical_fqn(name).split(".")[1]), module))
        return sorted(out, key=lambda item: item[0])

    def _reset_stats(self) -> None:
        self._stat_counts: torch.Tensor | None = None  # (n_moe_layers, E) global counts since last log
        self._stat_aux = 0.0
        self._stat_steps = 0

    @torch.no_grad()
    def post_optimizer_step(self) -> None:
        """Call once after every optimizer step, on every rank (it reduces over all of them): sums
        the step's token counts (and aux loss) over ranks, updates each router's expert_bias by
        bias_update_rate * sign(mean load - load), and keeps the counts for `metrics()`."""
        layers = self.moe_layers()
        if not layers:
            return
        mods = [m for _, m in layers]
        local = torch.cat([torch.stack([m.step_counts for m in mods]).flatten(),
                           torch.stack([m.step_aux for m in mods])])
        reduced = mods[0].reduce_counts(local.float())
        n, e = len(mods), mods[0].n_experts
        counts = reduced[: n * e].view(n, e)
        for i, m in enumerate(mods):
            if m.bias_update_rate > 0:
                load = counts[i]
                m.router.expert_bias += m.bias_update_rate * torch.sign(load.mean() - load)
            m.step_counts.zero_()
            m.step_aux.zero_()
        self._stat_counts = counts.clone() if self._stat_counts is None else self._stat_counts + counts
        self._stat_aux += float(reduced[n * e:].sum())
        self._stat_steps += 1
        self.router_bias_updates += 1

    def metrics(self) -> dict[str, float]:
        """Router statistics since the last call (per optimizer step, global over ranks):
        moe/imbalance_max and moe/imbalance_mean (max/mean tokens per expert, worst and average
        layer), moe/load_min (least-loaded expert / mean, worst layer; 0 = an idle expert),
        moe/aux_loss (sum over layers, when enabled) and moe/layer{i}_imbalance per MoE layer."""
        layers = self.moe_layers()
        if self._stat_steps == 0:
            if any(bool(m.step_counts.any()) for _, m in layers) and not self._warned_no_updates:
                self._warned_no_updates = True
                logger.warning(
                    "MoE: post_optimizer_step() was not called after the optimizer step: router "
                    "statistics are not reduced and the aux-loss-free expert bias is not updated")
            return {}
        counts = self._stat_counts
        mean = counts.mean(1).clamp(min=1e-9)
        imbalance = counts.max(1).values / mean
        out = {
            "moe/imbalance_max": float(imbalance.max()),
            "moe/imbalance_mean": float(imbalance.mean()),
            "moe/load_min": float((counts.min(1).values / mean).min()),
        }
        if any(m.aux_loss_coef > 0 for _, m in layers):
            out["moe/aux_loss"] = self._stat_aux / self._stat_steps
        for (layer_id, _), value in zip(layers, imbalance.tolist()):
            out[f"moe/layer{layer_id}_imbalance"] = value
        self._reset_stats()
        return out
