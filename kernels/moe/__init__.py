"""Grouped GEMM over experts: `grouped_mm(x, w, offs, backend)` and its layout rules.

x (M, K) holds rows sorted by group (expert), w (G, K, N) one matrix per group, offs (G,) int32 the
cumulative group ends (offs[-1] == M; empty groups allowed); out (M, N). See reference.py (the spec).

Backends:
  "loop"   - reference.py: one matmul per group (syncs the host to read offs); the spec.
  "torch"  - torch._grouped_mm: a CUTLASS grouped GEMM without host sync on sm_90+ in bfloat16;
             other GPUs / dtypes (and CPU) run PyTorch's per-group fallback (warned once on CUDA).
             Its CUDA kernel wants 16-byte aligned rows: `row_alignment` says how many rows each
             group should be padded to.
  "triton" - grouped_gemm_triton.py as the custom ops titankit::grouped_mm / grouped_mm_dw
             (CUDA, or CPU under TRITON_INTERPRET=1); no host sync.
"""

from __future__ import annotations

import logging

import torch

from kernels.moe import op as _op  # registers torch.ops.titankit.grouped_mm*
from kernels.moe.reference import grouped_mm_reference

logger = logging.getLogger(__name__)

BACKENDS = ("loop", "torch", "triton")

__all__ = ["BACKENDS", "grouped_mm", "grouped_mm_reference", "row_alignment"]

_warned: set[str] = set()


def _warn_once(key: str, msg: str) -> None:
    if key not in _warned:
        _warned.add(key)
        logger.warning(msg)


def row_alignment(backend: str, x: torch.Tensor) -> int:
    """Rows each group should be padded to for `backend` on x's device and dtype (1 = none).

    torch._grouped_mm's CUDA kernel reads groups with TMA, which wants every group to start on a
    16-byte boundary of the M dimension (torchtitan pads to 8 rows for bf16 for the same reason)."""
    if backend == "torch" and x.is_cuda:
        return 16 // x.element_size()
    return 1


def grouped_mm(x: torch.Tensor, w: torch.Tensor, offs: torch.Tensor, backend: str = "torch") -> torch.Tensor:
    """x (M, K), w (G, K, N) (any strides), offs (G,) int32 cumulative ends -> (M, N), differentiable."""
    if backend == "loop":
        return grouped_mm_reference(x, w, offs)
    if backend == "torch":
        if not hasattr(torch, "_grouped_mm"):
            raise ValueError(
                f"kernels.moe.grouped_mm: backend 'torch' needs torch._grouped_mm, which torch "
                f"{torch.__version__} lacks; use backend 'triton' or 'loop' (model.overrides.moe_backend)"
            )
        if x.is_cuda and (x.dtype != torch.bfloat16 or torch.cuda.get_device_capability(x.device) < (9, 0)):
            _warn_once("torch-fallback", (
                f"kernels.moe.grouped_mm: torch._grouped_mm runs its slow per-group fallback for "
                f"{x.dtype} on sm_{''.join(map(str, torch.cuda.get_device_capability(x.device)))} "
                "(its fast kernel needs bfloat16 on sm_90+); consider moe_backend 'triton'"))
        if x.dtype not in (torch.float32, torch.bfloat16, torch.float16):
            raise ValueError(f"kernels.moe.grouped_mm: backend 'torch' (torch._grouped_mm) takes "
                             f"float32, bfloat16 or float16, not {x.dtype}; use 'loop' or 'triton'")
        per_row = 16 // x.element_size()
        if x.shape[1] % per_row or w.shape[2] % per_row:
            raise ValueError(
                f"kernels.moe.grouped_mm: backend 'torch' (torch._grouped_mm) needs K = {x.shape[1]} "
                f"and N = {w.shape[2]} to be multiples of {per_row} for {x.dtype} (16-byte rows); "
                "use backend 'triton' or 'loop' for other shapes"
            )
        return _op.grouped_mm_torch(x, w, offs)
    if backend == "triton":
        return _op.grouped_mm_triton(x, w, offs)
    raise ValueError(f"kernels.moe.grouped_mm: unknown backend {backend!r}; valid: {', '.join(BACKENDS)}")
