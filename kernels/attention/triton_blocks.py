"""Launch-side helpers of the Triton attention kernels: tile configs and document block ranges.

Kept free of `triton` imports so the document-range math can be tested and reused without a GPU.

Document masking skips work in two steps. Here, on the device and without a host sync, every
"granule" of GRAN consecutive queries gets the half-open range [lo, hi) of key positions that can
hold a key of one of its documents (from per-granule min/max document ids, so it is a superset for
any id layout and exact for sorted packed sequences). Inside the kernel a query block of BLOCK_M
rows takes the union of its BLOCK_M // GRAN granule ranges and loops only over those key blocks,
masking element-wise. The backward's dK/dV kernel uses the same table with queries and keys swapped.
"""

from __future__ import annotations

import torch

# Granule of the document range tables: every block size of a config set is a multiple of it
# (bf16/fp16 tiles; the small fp32 tiles; the interpreter's fixed blocks).
GPU_GRANULE = 64
GPU_GRANULE_FP32 = 32
INTERPRET_GRANULE = 16

# Shared memory one thread block may use on H100/H200 (sm_90): 227 KiB (CUDA's
# sharedMemPerBlockOptin). A config above it fails to launch (Triton: OutOfResources).
HOPPER_SMEM_BYTES = 232448


def smem_bytes(kernel: str, tile: tuple[int, int, int, int], head_dim: int, elem_bytes: int) -> int:
    """Shared memory (bytes) that a config of `kernel` ("fwd", "dkdv", "dq") allocates, as a bound.

    Triton keeps the tile that stays resident in shared memory and `stages` buffers of each
    streamed tile (the software pipeline): fwd holds Q (BM, D) and streams K, V (BN, D); dK/dV
    holds K, V (BN, D) and streams Q, dO (BM, D) plus two fp32 row vectors (lse2, delta); dQ holds
    Q, dO (BM, D) and streams K, V (BN, D); 1 KiB covers the pipeline's mbarriers. For the bf16
    tiles at head dims 64/128 this is Triton 3.6/3.9's allocation for sm_90 to within 2 KiB, never
    below it; the fp32 (FMA) lowering of the 2-stage fp32 tiles allocates less (both checked
    against compiled kernels in tests/kernels/test_attention_configs.py). Not modelled: the
    layout-conversion scratch of the FMA lowering, which can exceed a 1-stage fp32 tile's bound.
    """
    bm, bn, _, stages = tile
    row = head_dim * elem_bytes
    if kernel == "fwd":
        return bm * row + stages * 2 * bn * row + 1024
    if kernel == "dkdv":
        return 2 * bn * row + stages * 2 * bm * (row + 4) + 1024
    if kernel == "dq":
        return 2 * bm * row + stages * 2 * bn * row + 1024
    raise ValueError(f"smem_bytes: unknown kernel {kernel!r}; valid: fwd, dkdv, dq")


def seq_bucket(n: int) -> int:
    """Autotune key for a sequence length: the next power of two (nearby lengths share tunes)."""
    return 1 << max(n - 1, 0).bit_length()


def _granule_min_max(doc: torch.Tensor, gran: int) -> tuple[torch.Tensor, torch.Tensor]:
    """doc (B, S) -> per-granule (min, max), each (B, ceil(S / gran)); the tail repeats the last."""
    b, s = doc.shape
    pad = (-s) % gran
    if pad:
        doc = torch.cat([doc, doc[:, -1:].expand(b, pad)], dim=1)
    g = doc.view(b, -1, gran)
    return g.amin(-1), g.amax(-1)


def doc_ranges(
    row_doc: torch.Tensor, col_doc: torch.Tensor, gran: int
) -> tuple[torch.Tensor, torch.Tensor]:
    """For each granule of `row_doc` (B, Sr), the column range [lo, hi) that may share a document.

    Returns int32 tensors lo, hi of shape (B, ceil(Sr / gran)); lo == hi == 0 when no column can
    match. Columns are grouped into granules of the same size; memory is B * (Sr/gran) * (Sc/gran).
    """
    sc = col_doc.shape[1]
    rmin, rmax = _granule_min_max(row_doc, gran)  # (B, nr)
    cmin, cmax = _granule_min_max(col_doc, gran)  # (B, nc)
    overlap = (cmax.unsqueeze(1) >= rmin.unsqueeze(2)) & (cmin.unsqueeze(1) <= rmax.unsqueeze(2))
    nc = overlap.shape[2]
    hit = overlap.any(-1)  # (B, nr)
    first = torch.argmax(overlap.to(torch.int8), dim=-1)  # argmax returns the first maximum
    last = nc - 1 - torch.argmax(overlap.flip(-1).to(torch.int8), dim=-1)
    lo = torch.where(hit, first * gran, 0)
    hi = torch.where(hit, torch.clamp((last + 1) * gran, max=sc), 0)
    return lo.to(torch.int32).contiguous(), hi.to(torch.int32).contiguous()
