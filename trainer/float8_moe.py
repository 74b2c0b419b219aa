"""FP8 training for the MoE grouped experts: the three grouped GEMMs of GroupedExperts in e4m3.

Float8GroupedExperts replaces trainer/models/moe.py's GroupedExperts (same parameters, same
weight_view, so expert parallelism and FSDP2 treat it alike). Per expert g with rows x_g (M_g, K)
and weight w_g (N, K) (nn.Linear layout: w1/w3 (E, H, D), w2 (E, D, H)), the GEMMs and the scaling
groups (always along the contraction dimension), recipe "rowwise" / "tensorwise":
    forward      out_g = x_g @ w_g^T      x per token row / whole x;  w per output row of w_g / per expert
    grad_input   dx_g = dy_g @ w_g        dy per token row / whole dy; w per column of w_g / per expert
    grad_weight  dw_g = dy_g^T @ x_g      dy and x per column over expert g's tokens / whole tensors
grad_weight stays in high precision with float8.grad_weight_high_precision. Its default is FP8 (False),
as for Float8Linear: the per-group column scales are what torchao's MoE recipe uses, the expert
weight gradients are averaged over many tokens, and the fp8 dw GEMM halves the bytes of the largest
backward GEMM; the flag is there for runs where fp8 gradient noise matters.

GEMM implementations (decided once per module, like Float8Linear):
- "emulated" (CPU, and the reference): operands quantized exactly as below, dequantized, multiplied
  in fp32 group by group (kernels.moe.grouped_mm_reference; reads offs on the host).
- "grouped" (CUDA sm_90 with torch._scaled_grouped_mm): one CUTLASS grouped kernel per GEMM, no host
  sync. Layout rules (torch/_meta_registrations.py, _meta_grouped_mm_common): a row-major, b
  column-major, fp32 scales, bf16 output; 2d x 3d: scale_a (M,), scale_b (G, N); 2d x 2d (grad_weight,
  groups along the contraction): scale_a (G * N,), scale_b (G * K,). Groups start on 16-row boundaries.
- "scaled_mm" (CUDA sm_89+ without it, e.g. an older torch): one torch._scaled_mm per non-empty expert
  (host sync on offs; groups padded to 16 rows, the contraction of grad_weight).
float8.backend "triton"/"thunderkittens" have no grouped FP8 kernel: the experts use the torch ops
above (a warning at conversion says so).
"""

from __future__ import annotations

import torch

import kernels.moe
from kernels.fp8 import reference as R
from trainer.log import logger
from trainer.models.moe import GroupedExperts, grouped_swiglu


GEMMS = ("emulated", "grouped", "scaled_mm")
_ROW_ALIGN = 16  # e4m3 rows of 16 bytes: group starts (and grad_weight's contraction) for cuBLAS/CUTLASS
_warned: set[str] = set()


def pick_cuda_gemm() -> str:
    """The GEMM implementation the CUDA path uses on this machine (see the module docstring)."""
    if not torch.cuda.is_available():
        return "emulated"
    cap = torch.cuda.get_device_capability()
    if hasattr(torch, "_scaled_grouped_mm") and cap[0] == 9:
        return "grouped"
    if cap >= (8, 9):
        return "scaled_mm"
    return "emulated"


# ----------------------------------------------------------------------------- quantization


def _whole_amax(t: torch.Tensor) -> torch.Tensor:
    """finite_amax of the whole tensor as (1, 1); 0 for a tensor without rows (an expert-parallel
    rank can receive no tokens at all)."""
    if t.numel() == 0:
        return t.new_zeros((1, 1), dtype=torch.float32)
    return R.finite_amax(t).reshape(1, 1)


def _quant_rows(t: torch.Tensor, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """t (M, C) -> q (M, C) e4m3, inv (M,) per row or (1,) for the whole tensor."""
    amax = R.finite_amax(t, dim=1) if rowwise else _whole_amax(t)
    q, inv = R.quantize_with_amax(t, amax)
    return q, inv.reshape(-1)


def _quant_weight(w: torch.Tensor, rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """w (G, R, C) (any strides) scaled along C -> q (G, R, C) contiguous, inv (G, R) (per row of each
    expert, or one value per expert broadcast over R)."""
    amax = R.finite_amax(w, dim=2) if rowwise else R.finite_amax(w, dim=2).amax(1, keepdim=True)
    q, inv = R.quantize_with_amax(w, amax)
    return q.contiguous(), inv.reshape(w.shape[0], -1).expand(w.shape[0], w.shape[1]).contiguous()


def _quant_group_cols(t: torch.Tensor, ids: torch.Tensor, n_groups: int,
                      rowwise: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """t (M, C) rows grouped by ids (M,) -> q (M, C), inv (G, C): one scale per column of each group
    (rowwise) or one for the whole tensor broadcast to (G, C). An empty group gets amax 0 -> the
    AMAX_EPS scale (finite)."""
    if rowwise:
        a = t.float().abs()
        a = torch.where(a < float("inf"), a, torch.zeros_like(a))
        amax = a.new_zeros(n_groups, t.shape[1]).scatter_reduce(
            0, ids.unsqueeze(1).expand_as(a), a, "amax", include_self=True)  # (G, C)
        q, _ = R.quantize_with_amax(t, amax[ids])  # same fp32 scale math, per element's group
        return q, R.scales_from_amax(amax)[1]
    q, inv = R.quantize_with_amax(t, _whole_amax(t))
    return q, inv.reshape(1, 1).expand(n_groups, t.shape[1]).contiguous()


def _group_ids(offs: torch.Tensor, m: int) -> torch.Tensor:
    counts = torch.diff(offs.long(), prepend=offs.new_zeros(1).long())
    return torch.repeat_interleave(torch.arange(offs.shape[0], device=offs.device), counts, output_size=m)


# ----------------------------------------------------------------------------- GEMMs


def _gemm_2d3d(qa, inv_a, qb, inv_b, offs, out_dtype, fast: bool, gemm: str) -> torch.Tensor:
    """out (M, N) = per group (qa * inv_a)[rows g] @ ((qb[g] * inv_b[g]))^T.
    qa (M, K) e4m3, inv_a (M,) or (1,); qb (G, N, K) contiguous e4m3, inv_b (G, N)."""
    m, n = qa.shape[0], qb.shape[1]
    if gemm == "emulated":
        a = R.dequantize(qa, inv_a.unsqueeze(1))
        b = R.dequantize(qb, inv_b.unsqueeze(2))  # (G, N, K)
        return kernels.moe.grouped_mm_reference(a, b.transpose(1, 2), offs).to(out_dtype)
    sa = inv_a.expand(m).contiguous()
    if gemm == "grouped":
        out = torch._scaled_grouped_mm(qa, qb.transpose(1, 2), sa, inv_b, offs=offs,
                                       out_dtype=torch.bfloat16, use_fast_accum=fast)
        return out.to(out_dtype)
    out = qa.new_zeros((m, n), dtype=out_dtype)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            out[start:end] = torch._scaled_mm(
                qa[start:end], qb[g].t(), sa[start:end].unsqueeze(1), inv_b[g].unsqueeze(0),
                out_dtype=torch.bfloat16, use_fast_accum=fast).to(out_dtype)
        start = end
    return out


def _gemm_dw(qa, inv_a, qb, inv_b, offs, out_dtype, gemm: str) -> torch.Tensor:
    """dw (G, N, K): dw[g] = (qa * inv_a[g])[rows g]^T @ (qb * inv_b[g])[rows g].
    qa (M, N), qb (M, K) e4m3; inv_a (G, N), inv_b (G, K). Empty groups give zeros."""
    g_n = offs.shape[0]
    n, k = qa.shape[1], qb.shape[1]
    if gemm == "grouped":
        a = qa.t().contiguous()  # (N, M) row-major
        b = qb.t().contiguous().t()  # (M, K) column-major
        out = torch._scaled_grouped_mm(a, b, inv_a.reshape(-1).contiguous(), inv_b.reshape(-1).contiguous(),
                                       offs=offs, out_dtype=torch.bfloat16, use_fast_accum=False)
        counts = torch.diff(offs, prepend=offs.new_zeros(1))
        # An empty group's output is not written by every kernel version: zero it explicitly.
        return torch.where((counts > 0).view(-1, 1, 1), out, torch.zeros_like(out)).to(out_dtype)
    dw = qa.new_zeros((g_n, n, k), dtype=out_dtype if gemm != "emulated" else torch.float32)
    if gemm == "scaled_mm":
        at, bt = qa.t().contiguous(), qb.t().contiguous()  # (N, M), (K, M)
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            if gemm == "emulated":
                a = R.dequantize(qa[start:end], inv_a[g].unsqueeze(0))
                b = R.dequantize(qb[start:end], inv_b[g].unsqueeze(0))
                dw[g] = a.t() @ b
            else:
                dw[g] = torch._scaled_mm(at[:, start:end], bt[:, start:end].t(), inv_a[g].unsqueeze(1),
                                         inv_b[g].unsqueeze(0), out_dtype=torch.bfloat16).to(out_dtype)
        start = end
    return dw.to(out_dtype)


class _Float8GroupedMM(torch.autograd.Function):
    """out (M, N) = x @ w[g]^T per group: x (M, K) rows sorted by group, w (G, N, K), offs (G,) int32
    cumulative ends with offs[-1] == M."""

    @staticmethod
    def forward(ctx, x, w, offs, rowwise: bool, gemm: str, gw_hp: bool):
        qx, sx = _quant_rows(x, rowwise)
        qw, sw = _quant_weight(w, rowwise)  # per output row of each expert
        out = _gemm_2d3d(qx, sx, qw, sw, offs, x.dtype, True, gemm)
        ctx.save_for_backward(x, w, offs)
        ctx.cfg = (rowwise, gemm, gw_hp)
        return out

    @staticmethod
    def backward(ctx, dy):
        x, w, offs = ctx.saved_tensors
        rowwise, gemm, gw_hp = ctx.cfg
        dy = dy.contiguous()
        dx = dw = None
        if ctx.needs_input_grad[0]:
            qdy, sdy = _quant_rows(dy, rowwise)
            qwt, swt = _quant_weight(w.transpose(1, 2), rowwise)  # (G, K, N), scaled along N
            dx = _gemm_2d3d(qdy, sdy, qwt, swt, offs, x.dtype, False, gemm)
        if ctx.needs_input_grad[1]:
            if gw_hp:
                dw = _hp_dw(dy, x, offs).to(w.dtype)
            else:
                ids = _group_ids(offs, x.shape[0])
                qdy_c, sdy_c = _quant_group_cols(dy, ids, w.shape[0], rowwise)
                qx_c, sx_c = _quant_group_cols(x, ids, w.shape[0], rowwise)
                dw = _gemm_dw(qdy_c, sdy_c, qx_c, sx_c, offs, w.dtype, gemm)
        return dx, dw, None, None, None, None


def _hp_dw(dy: torch.Tensor, x: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
    """High-precision grad_weight (G, N, K) = dy_g^T @ x_g in dy's dtype (bf16 under FSDP2)."""
    if dy.is_cuda and hasattr(torch, "_grouped_mm") and dy.dtype == torch.bfloat16:
        out = torch._grouped_mm(dy.t(), x.to(dy.dtype), offs=offs)  # (N, M) x (M, K) -> (G, N, K)
        counts = torch.diff(offs, prepend=offs.new_zeros(1))
        return torch.where((counts > 0).view(-1, 1, 1), out, torch.zeros_like(out))
    dw = dy.new_zeros((offs.shape[0], dy.shape[1], x.shape[1]))
    start = 0
    for g, end in enumerate(offs.tolist()):
        if end > start:
            dw[g] = dy[start:end].t() @ x[start:end].to(dy.dtype)
        start = end
    return dw


def float8_grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, recipe: str = "rowwise",
                      gemm: str = "emulated", grad_weight_high_precision: bool = False) -> torch.Tensor:
    """Differentiable FP8 grouped GEMM: x (M, K) rows sorted by group, w (G, N, K) (nn.Linear layout
    per group), offs (G,) int32 cumulative ends (offs[-1] == M, empty groups allowed) -> (M, N)."""
    if recipe not in ("tensorwise", "rowwise"):
        raise ValueError(f"float8_grouped_mm: recipe {recipe!r} is not 'tensorwise' or 'rowwise'")
    if gemm not in GEMMS:
        raise ValueError(f"float8_grouped_mm: gemm {gemm!r} is not one of {GEMMS}")
    return _Float8GroupedMM.apply(x, w, offs, recipe == "rowwise", gemm, grad_weight_high_precision)


class Float8GroupedExperts(GroupedExperts):
    """GroupedExperts whose three grouped GEMMs run in FP8 (module docstring); parameters unchanged."""

    def __init__(self, dim: int, hidden_dim: int, n_experts: int, backend: str, *, recipe: str = "rowwise",
                 grad_weight_high_precision: bool = False, device=None) -> None:
        if dim % 16 or hidden_dim % 16:
            raise ValueError(f"Float8GroupedExperts: dim={dim} and moe_hidden_dim={hidden_dim} must be "
                             "multiples of 16 (FP8 GEMM rows are 16-byte aligned)")
        if recipe not in ("tensorwise", "rowwise"):
            raise ValueError(f"Float8GroupedExperts: recipe {recipe!r} is not 'tensorwise' or 'rowwise'")
        with torch.device(device or "meta"):
            super().__init__(dim, hidden_dim, n_experts, backend)
        self.recipe = recipe
        self.grad_weight_high_precision = grad_weight_high_precision
        # Decided once (a CUDA query per call would sit inside compiled graphs). Tests may set it.
        self.cuda_gemm = pick_cuda_gemm()

    @classmethod
    def from_experts(cls, mod: GroupedExperts, recipe: str,
                     grad_weight_high_precision: bool = False) -> "Float8GroupedExperts":
        """A Float8GroupedExperts sharing `mod`'s parameters and weight_view (works on meta)."""
        e, h, d = mod.w1.shape
        new = cls(d, h, e, mod.backend, recipe=recipe, grad_weight_high_precision=grad_weight_high_precision)
        new.w1, new.w2, new.w3 = mod.w1, mod.w2, mod.w3
        new.weight_view = mod.weight_view
        return new

    def _gemm(self, x: torch.Tensor) -> str:
        if not x.is_cuda:
            return "emulated"
        if self.cuda_gemm == "emulated" and "emulated" not in _warned:
            _warned.add("emulated")
            logger.warning("Float8GroupedExperts: this GPU has no FP8 GEMM (needs sm_89+); the expert "
                           "GEMMs are emulated in fp32 (slower than bf16)")
        return self.cuda_gemm

    def forward(self, x: torch.Tensor, counts: torch.Tensor) -> torch.Tensor:
        """x (n, D) rows grouped by expert, counts (E_local,) int64 rows per expert -> (n, D)."""
        w1, w2, w3 = (self.weight_view(w) for w in (self.w1, self.w2, self.w3))
        gemm = self._gemm(x)
        # The fp8 kernels want every group on a 16-row boundary (TMA; grad_weight's contraction).
        align = 1 if gemm == "emulated" else _ROW_ALIGN

        def gmm(a: torch.Tensor, w: torch.Tensor, offs: torch.Tensor) -> torch.Tensor:
            return _Float8GroupedMM.apply(a, w, offs, self.recipe == "rowwise", gemm,
                                          self.grad_weight_high_precision)

        return grouped_swiglu(x, counts, align, gmm, w1, w2, w3)

    def extra_repr(self) -> str:
        return f"recipe={self.recipe}, gemm={self.cuda_gemm} (CUDA) / emulated (CPU)"
