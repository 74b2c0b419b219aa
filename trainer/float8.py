"""FP8 training: swap large nn.Linear modules for Float8Linear (e4m3 GEMMs with dynamic scaling).

Recipes (`float8.recipe`), following torchao's float8 training:
- "tensorwise": one scale per tensor (x, W, grad_out); fastest.
- "rowwise": one scale per row of each GEMM operand along its contraction dimension (x and grad_out
  per token, W per output or input feature); more robust to outliers.
All three GEMMs run in e4m3 (the forward and both backward GEMMs), with fp32 scales computed from the
current amax (kernels/fp8/reference.py documents the edge cases). grad_weight can stay in high
precision (`float8.grad_weight_high_precision`). Forward GEMMs use fast accumulation, backward GEMMs
promote to fp32 (gradients are the precision-sensitive side), as torchao does.

Backends (`float8.backend`):
- "torch": quantization in eager PyTorch (fused by torch.compile) and `torch._scaled_mm` (CUDA sm_89+).
  On CPU, and on GPUs without `_scaled_mm` (a warning at conversion), the GEMM is EMULATED: the
  operands are quantized to float8_e4m3fn with exactly the same scales and rounding, dequantized and
  multiplied in fp32. The emulation is numerically the fp8 recipe, not a speed-up: CPU tests and
  CPU debug runs exercise the real quantization.
- "triton": titankit's Triton kernels (kernels/fp8; sm_90+; CUDA only).
- "thunderkittens": the ThunderKittens rowwise GEMM (kernels/thunderkittens; sm_90a, needs THUNDERKITTENS_ROOT).

Composition:
- Weights stay ordinary parameters (fp32 master or FSDP2's bf16 unsharded copy), so FSDP2 all-gathers
  them in bf16 as for any Linear; Float8Linear subclasses nn.Linear so TP styles accept it.
- DTensor (tensor parallelism): when the weight arrives as a DTensor, the matmul runs on local shards
  (to_local / from_local, with the gradient placements of a sharded matmul) and every amax whose
  scaling group is split across ranks is all-reduced (max) over that mesh axis, so the scales equal
  the unsharded ones: tensorwise for any sharded tensor, rowwise when the contraction dimension is
  sharded (RowwiseParallel's W and x, ColwiseParallel's grad_out and W in the backward). Supported
  per mesh axis: (x Replicate, W Shard(0)) = ColwiseParallel, (x Shard(-1), W Shard(1)) =
  RowwiseParallel, (x Shard(batch/seq), W Replicate), and all-Replicate.
- Data parallelism (FSDP2): each rank scales its own tokens, as in torchao: the rowwise forward and
  grad_input are per token, so they equal one rank's; grad_weight's scales (per feature over the
  local tokens) and tensorwise activation scales differ, so DP matches one rank to FP8 noise, not
  bitwise. tests/distributed/test_float8_distributed.py runs the Trainer on 2 gloo ranks (FSDP2, TP,
  TP + compile) against 1 rank and explains each tolerance.
- MoE: each GroupedExperts becomes a Float8GroupedExperts (trainer/float8_moe.py: the three grouped
  expert GEMMs in e4m3, torch._scaled_grouped_mm or per-expert torch._scaled_mm on CUDA), under the
  same filter_fqns; the router stays in high precision and shared experts are ordinary Linears.
- torch.compile: no data-dependent Python control flow; the only branches are on device type, dtype
  and shapes (guards). Inductor fuses each "torch"-backend quantization into one kernel.
"""

from __future__ import annotations

import os
import warnings

import torch
from torch import nn

from kernels import fp8
from trainer.log import logger

RECIPES = ("tensorwise", "rowwise")
BACKENDS = ("torch", "triton", "thunderkittens")
_TOKEN_MULTIPLE = 16  # cuBLAS and TMA need 16-byte rows for the grad_weight operands (M x e4m3)


def _interpreting() -> bool:
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _cuda_scaled_mm_supported() -> bool:
    """torch._scaled_mm with e4m3 needs sm_89 (Ada) or newer."""
    return torch.cuda.is_available() and torch.cuda.get_device_capability() >= (8, 9)


def validate_float8_config(cfg) -> None:
    """Raise ValueError naming the `[float8]` key when a value is invalid on this machine."""
    if cfg.recipe not in RECIPES:
        raise ValueError(f"float8.recipe = {cfg.recipe!r}: must be one of {RECIPES}")
    if cfg.backend not in BACKENDS:
        raise ValueError(f"float8.backend = {cfg.backend!r}: must be one of {BACKENDS}")
    if cfg.backend == "thunderkittens" and not torch.cuda.is_available():
        raise ValueError("float8.backend = 'thunderkittens' needs an sm_90 GPU and a ThunderKittens "
                         "checkout (THUNDERKITTENS_ROOT); on CPU use 'torch'")
    if cfg.backend == "triton" and not _interpreting():
        if not torch.cuda.is_available():
            raise ValueError("float8.backend = 'triton' needs a CUDA GPU (sm_90+); on CPU use 'torch', "
                             "which emulates the FP8 GEMMs with the same quantization")
        if torch.cuda.get_device_capability() < (9, 0):
            raise ValueError("float8.backend = 'triton' needs a Hopper or newer GPU (sm_90+, TMA); "
                             "use 'torch' (torch._scaled_mm) on this GPU")
    if not isinstance(cfg.filter_fqns, (list, tuple)) or not all(isinstance(f, str) for f in cfg.filter_fqns):
        raise ValueError(f"float8.filter_fqns = {cfg.filter_fqns!r}: must be a list of strings")


class _AmaxSync:
    """Which process groups each operand's amax is all-reduced over (tensor parallelism).

    Roles name (tensor, contraction dimension): x_k, w_k (forward), dy_n, w_n (grad_input),
    dy_m, x_m (grad_weight)."""

    def __init__(self, groups: dict[str, tuple]):
        self.groups = groups

    def reducer(self, role: str):
        groups = self.groups.get(role, ())
        if not groups:
            return None

        def reduce(amax: torch.Tensor) -> torch.Tensor:
            import torch.distributed._functional_collectives as funcol

            for group in groups:
                amax = funcol.wait_tensor(funcol.all_reduce(amax, "max", group))
            return amax

        return reduce


def _reducer(sync: _AmaxSync | None, role: str):
    return None if sync is None else sync.reducer(role)


def _col_scale(inv: torch.Tensor) -> torch.Tensor:
    """A per-row inv_scale (N, 1) of B^T becomes the (1, N) scale of B; 0-dim stays as it is."""
    return inv.reshape(1, -1) if inv.dim() == 2 else inv


class _Float8Matmul(torch.autograd.Function):
    """out = x @ w^T with e4m3 operands. x (..., K), w (N, K) -> out (..., N) in x.dtype."""

    @staticmethod
    def forward(ctx, x, w, granularity: str, qbackend: str, gbackend: str, gw_hp: bool, sync):
        K, N = w.shape[1], w.shape[0]
        x2 = x.reshape(-1, K)
        if x2.shape[0] % _TOKEN_MULTIPLE:
            raise ValueError(f"Float8Linear: the token count (product of the input's leading dims) is "
                             f"{x2.shape[0]}; FP8 GEMMs need a multiple of {_TOKEN_MULTIPLE} "
                             "(change training.local_batch_size or training.seq_len)")
        qx, sx = fp8.quantize(x2, granularity, "row", qbackend, _reducer(sync, "x_k"))  # (M, K), (M, 1)
        qw, sw = fp8.quantize(w, granularity, "row", qbackend, _reducer(sync, "w_k"))  # (N, K), (N, 1)
        out = fp8.scaled_mm(qx, qw.t(), sx, _col_scale(sw), x.dtype, True, gbackend)  # (M, N)
        ctx.save_for_backward(x, w)  # high precision, as nn.Linear does (FSDP2 frees/refills w)
        ctx.cfg = (granularity, qbackend, gbackend, gw_hp, sync)
        return out.reshape(*x.shape[:-1], N)

    @staticmethod
    def backward(ctx, dy):
        x, w = ctx.saved_tensors
        gran, qb, gb, gw_hp, sync = ctx.cfg
        N, K = w.shape
        x2 = x.reshape(-1, K)
        dy2 = dy.reshape(-1, N)
        need_dx, need_dw = ctx.needs_input_grad[0], ctx.needs_input_grad[1]
        dx = dw = None
        if gran == "tensorwise" and need_dx and need_dw and not gw_hp:
            # One amax and one read of grad_out give both layouts.
            qdy, sdy, qdyt, sdyt = fp8.quantize_both(dy2, gran, qb, _reducer(sync, "dy_n"))
        else:
            qdy = sdy = qdyt = sdyt = None
            if need_dx:
                qdy, sdy = fp8.quantize(dy2, gran, "row", qb, _reducer(sync, "dy_n"))  # (M, N)
            if need_dw and not gw_hp:
                qdyt, sdyt = fp8.quantize(dy2, gran, "col_t", qb, _reducer(sync, "dy_m"))  # (N, M)
        if need_dx:
            # grad_input (M, K) = dy (M, N) @ w (N, K): w is the K-major (K, N) operand, scaled per K.
            qwt, swt = fp8.quantize(w, gran, "col_t", qb, _reducer(sync, "w_n"))
            dx = fp8.scaled_mm(qdy, qwt.t(), sdy, _col_scale(swt), x.dtype, False, gb).reshape(x.shape)
        if need_dw:
            if gw_hp:
                dw = dy2.t().mm(x2.to(dy2.dtype)).to(w.dtype)
            else:
                # grad_weight (N, K) = dy^T (N, M) @ x (M, K): contraction over the tokens.
                qxt, sxt = fp8.quantize(x2, gran, "col_t", qb, _reducer(sync, "x_m"))  # (K, M)
                dw = fp8.scaled_mm(qdyt, qxt.t(), sdyt, _col_scale(sxt), w.dtype, False, gb)
        return dx, dw, None, None, None, None, None


class Float8Linear(nn.Linear):
    """nn.Linear whose matmul runs in FP8 (see the module docstring); weight and bias unchanged."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, *,
                 recipe: str = "tensorwise", backend: str = "torch",
                 grad_weight_high_precision: bool = False, device=None, dtype=None) -> None:
        if in_features % 16 or out_features % 16:
            raise ValueError(f"Float8Linear: in_features={in_features} and out_features={out_features} "
                             "must be multiples of 16 (FP8 GEMM rows are 16-byte aligned)")
        if recipe not in RECIPES:
            raise ValueError(f"Float8Linear: recipe {recipe!r} is not one of {RECIPES}")
        if backend not in BACKENDS:
            raise ValueError(f"Float8Linear: backend {backend!r} is not one of {BACKENDS}")
        super().__init__(in_features, out_features, bias, device=device, dtype=dtype)
        self.recipe = recipe
        self.backend = backend
        self.grad_weight_high_precision = grad_weight_high_precision
        self._qbackend = "triton" if backend == "triton" else "reference"
        # Decided once (not per call, which would put a CUDA query inside compiled graphs).
        self._cuda_gemm = backend if backend != "torch" else (
            "torch" if _cuda_scaled_mm_supported() else "emulated")

    @classmethod
    def from_linear(cls, mod: nn.Linear, recipe: str, backend: str,
                    grad_weight_high_precision: bool = False) -> "Float8Linear":
        """A Float8Linear sharing `mod`'s weight and bias Parameters (works on meta modules)."""
        with torch.device("meta"):
            new = cls(mod.in_features, mod.out_features, mod.bias is not None, recipe=recipe,
                      backend=backend, grad_weight_high_precision=grad_weight_high_precision)
        new.weight = mod.weight
        new.bias = mod.bias
        return new

    def _gemm_backend(self, x: torch.Tensor) -> str:
        if x.is_cuda:
            return self._cuda_gemm
        if self.backend == "thunderkittens" or (self.backend == "triton" and not _interpreting()):
            raise ValueError(f"Float8Linear: float8.backend = {self.backend!r} runs on CUDA tensors only; "
                             "on CPU use 'torch' (emulated FP8)")
        return "triton" if self.backend == "triton" else "emulated"

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        args = (self.recipe, self._qbackend, self._gemm_backend(x), self.grad_weight_high_precision)
        w = self.weight
        if _is_dtensor(w) or _is_dtensor(x):
            out = _dtensor_matmul(x, w, args)
        else:
            out = _Float8Matmul.apply(x, w, *args, None)
        return out if self.bias is None else out + self.bias

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, recipe={self.recipe}, backend={self.backend}"


def _is_dtensor(t) -> bool:
    from torch.distributed.tensor import DTensor

    return isinstance(t, DTensor)


def _dtensor_matmul(x, w, args):
    """Run _Float8Matmul on local shards; see the module docstring for the supported placements."""
    from torch.distributed.tensor import DTensor, Partial, Replicate, Shard

    if not (_is_dtensor(x) and _is_dtensor(w)) or x.device_mesh != w.device_mesh:
        raise ValueError("Float8Linear: input and weight must both be DTensors on the same mesh (or both "
                         "plain tensors); apply the TP style to the whole module")
    mesh, D = w.device_mesh, x.ndim

    def shard_dim(p, ndim: int):
        if isinstance(p, Shard):
            return p.dim % ndim
        if isinstance(p, Replicate):
            return None
        raise ValueError(f"Float8Linear: unsupported input/weight placement {p}")

    out_pl, dx_pl, dw_pl, dy_dims, x_dims, w_dims = [], [], [], [], [], []
    for xp, wp in zip(x.placements, w.placements):
        xs, ws = shard_dim(xp, D), shard_dim(wp, 2)
        if xs is None and ws is None:
            pl = (Replicate(), Replicate(), Replicate(), None)
        elif xs is None and ws == 0:  # ColwiseParallel: output features split
            pl = (Shard(D - 1), Partial(), Shard(0), D - 1)
        elif xs == D - 1 and ws == 1:  # RowwiseParallel: contraction dim split, partial sums out
            pl = (Partial(), Shard(D - 1), Shard(1), None)
        elif xs is not None and xs < D - 1 and ws is None:  # tokens split, weight replicated
            pl = (Shard(xs), Shard(xs), Partial(), xs)
        else:
            raise ValueError(f"Float8Linear: unsupported placements input {xp}, weight {wp}; supported: "
                             "ColwiseParallel, RowwiseParallel, token-sharded input with a replicated weight")
        out_pl.append(pl[0])
        dx_pl.append(pl[1])
        dw_pl.append(pl[2])
        dy_dims.append(pl[3])
        x_dims.append(xs)
        w_dims.append(ws)

    rowwise = args[0] == "rowwise"
    m_dims = set(range(D - 1))

    def groups(dims: list, contraction: set) -> tuple:
        # Tensorwise: every split tensor; rowwise: only when the scaling group (contraction) is split.
        return tuple(mesh.get_group(i) for i, d in enumerate(dims)
                     if d is not None and (not rowwise or d in contraction))

    sync = _AmaxSync({
        "x_k": groups(x_dims, {D - 1}), "x_m": groups(x_dims, m_dims),
        "w_k": groups(w_dims, {1}), "w_n": groups(w_dims, {0}),
        "dy_n": groups(dy_dims, {D - 1}), "dy_m": groups(dy_dims, m_dims),
    })
    out = _Float8Matmul.apply(x.to_local(grad_placements=dx_pl), w.to_local(grad_placements=dw_pl),
                              *args, sync)
    return DTensor.from_local(out, mesh, out_pl, run_check=False)


def _keep_reason(fqn: str, mod: nn.Linear, filters) -> str | None:
    hit = next((f for f in filters if f in fqn), None)
    if hit is not None:
        return f"name matches {hit!r}"
    if mod.in_features % 16 or mod.out_features % 16:
        return "a dimension is not a multiple of 16"
    return None


def _warn_unmatched_filters(model: nn.Module, filters) -> None:
    """A filter_fqns entry that is in no Linear's or experts' name keeps nothing in high precision: a
    typo ("outptu") would put the output layer in FP8 without a word. Rank 0 says so, once."""
    from trainer.config.fields import suggest
    from trainer.models.moe import GroupedExperts

    if os.environ.get("RANK", "0") != "0":
        return
    names = [fqn for fqn, mod in model.named_modules() if type(mod) in (nn.Linear, GroupedExperts)]
    leaves = sorted({n.rsplit(".", 1)[-1] for n in names})
    for f in filters:
        if any(f in n for n in names):
            continue
        hint = suggest(f, leaves + names)
        logger.warning(
            "float8.filter_fqns: %r matches no Linear or MoE experts of the model, so it keeps nothing in "
            "high precision%s; an entry keeps every module whose name contains it (names here: %s)",
            f, f" (did you mean {hint!r}?)" if hint else "", ", ".join(leaves) or "none")


def convert_to_float8_training(model: nn.Module, float8_cfg) -> list[str]:
    """Swap each nn.Linear of `model` (in place, by module name) for a Float8Linear sharing its
    parameters, except those filtered: names containing any of float8.filter_fqns, and Linears with
    in_features or out_features not divisible by 16. MoE GroupedExperts become Float8GroupedExperts
    (trainer/float8_moe.py) under the same filter. Call it before parallelize (it works on meta).
    Returns the converted module names; does nothing when float8.enable is false."""
    if not float8_cfg.enable:
        return []
    validate_float8_config(float8_cfg)
    if float8_cfg.backend == "torch" and torch.cuda.is_available() and not _cuda_scaled_mm_supported():
        warnings.warn("float8.backend = 'torch': this GPU has no FP8 tensor cores (needs sm_89+); the FP8 "
                      "GEMMs will be emulated in fp32 (slower than bf16)", stacklevel=2)
    _warn_unmatched_filters(model, float8_cfg.filter_fqns)
    converted, kept = [], []
    for fqn, mod in list(model.named_modules()):
        if type(mod) is not nn.Linear:
            continue
        if fqn == "":
            raise ValueError("convert_to_float8_training: the model itself is an nn.Linear; pass its parent")
        reason = _keep_reason(fqn, mod, float8_cfg.filter_fqns)
        if reason is not None:
            kept.append(f"{fqn} ({reason})")
            continue
        parent_name, _, child = fqn.rpartition(".")
        parent = model.get_submodule(parent_name)
        setattr(parent, child, Float8Linear.from_linear(
            mod, float8_cfg.recipe, float8_cfg.backend, float8_cfg.grad_weight_high_precision))
        converted.append(fqn)
    logger.info("float8: %d Linear layers -> Float8Linear (recipe=%s, backend=%s); %d kept in high "
                "precision: %s", len(converted), float8_cfg.recipe, float8_cfg.backend, len(kept),
                ", ".join(kept) or "none")
    return converted + _convert_grouped_experts(model, float8_cfg)


def _convert_grouped_experts(model: nn.Module, float8_cfg) -> list[str]:
    """Swap each MoE GroupedExperts for a Float8GroupedExperts (trainer/float8_moe.py) unless its
    name contains one of float8.filter_fqns or dim / moe_hidden_dim is not a multiple of 16."""
    from trainer.float8_moe import Float8GroupedExperts, pick_cuda_gemm
    from trainer.models.moe import GroupedExperts

    converted, kept = [], []
    for fqn, mod in list(model.named_modules()):
        if type(mod) is not GroupedExperts:
            continue
        e, h, d = mod.w1.shape
        hit = next((f for f in float8_cfg.filter_fqns if f in fqn), None)
        if hit is not None or d % 16 or h % 16:
            kept.append(f"{fqn} ({f'name matches {hit!r}' if hit else 'a dimension is not a multiple of 16'})")
            continue
        parent_name, _, child = fqn.rpartition(".")
        setattr(model.get_submodule(parent_name), child, Float8GroupedExperts.from_experts(
            mod, float8_cfg.recipe, float8_cfg.grad_weight_high_precision))
        converted.append(fqn)
    if converted and float8_cfg.backend != "torch":
        warnings.warn(f"float8.backend = {float8_cfg.backend!r} has no grouped FP8 kernel: the MoE experts "
                      f"use torch's FP8 GEMMs ({pick_cuda_gemm()} here)", stacklevel=3)
    if converted or kept:
        logger.info("float8: %d MoE GroupedExperts -> Float8GroupedExperts (CUDA GEMM: %s); %d kept in "
                    "high precision: %s", len(converted), pick_cuda_gemm(), len(kept), ", ".join(kept) or "none")
    return converted
