"""Eager fp32 attention: the spec every other backend of `kernels.attention` is tested against.

Layout (docs/interfaces.md, "Attention"): q (B, Sq, Hq, D), k and v (B, Skv, Hkv, D), Hq % Hkv == 0;
query head h reads key/value head h // (Hq // Hkv). lse (B, Hq, Sq) float32, natural log.
Causal masks are bottom-right aligned: query i sees key j iff j <= i + (Skv - Sq). With document
ids, query i sees key j only when q_doc[b, i] == kv_doc[b, j].

A query row that sees no key at all (possible with Sq > Skv, or with document ids of a key block
that holds none of the query's documents, as in ring attention) has out = 0 and lse = -inf; its
gradients are zero. All math runs in float32; results come back in the input dtype (lse stays
float32).
"""

from __future__ import annotations

import math

import torch


def allowed_mask(
    sq: int,
    skv: int,
    *,
    causal: bool,
    q_doc: torch.Tensor | None,
    kv_doc: torch.Tensor | None,
    device: torch.device,
) -> torch.Tensor | None:
    """Boolean mask of visible (query, key) pairs, broadcastable to (B, 1, Sq, Skv); None: all."""
    mask = None
    if causal:
        i = torch.arange(sq, device=device).view(sq, 1)
        j = torch.arange(skv, device=device).view(1, skv)
        mask = (j <= i + (skv - sq)).view(1, 1, sq, skv)
    if q_doc is not None and kv_doc is not None:
        # (B, Sq, 1) == (B, 1, Skv) -> (B, 1, Sq, Skv)
        same = (q_doc.unsqueeze(2) == kv_doc.unsqueeze(1)).unsqueeze(1)
        mask = same if mask is None else mask & same
    return mask


def _grouped(q: torch.Tensor, hkv: int) -> torch.Tensor:
    """(B, S, Hq, D) -> (B, Hkv, G, S, D) float32, G = Hq // Hkv query heads per KV head."""
    b, s, hq, d = q.shape
    return q.float().view(b, s, hkv, hq // hkv, d).permute(0, 2, 3, 1, 4)


def _probs(
    q: torch.Tensor,
    k: torch.Tensor,
    causal: bool,
    q_doc: torch.Tensor | None,
    kv_doc: torch.Tensor | None,
    lse: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """P = exp(q k^T * scale - lse), shape (B, Hkv, G, Sq, Skv), and lse (B, Hkv, G, Sq).

    With lse None the row's own log-sum-exp is used (the forward); otherwise the given one (the
    global lse of the backward contract, shape (B, Hq, Sq)).
    """
    b, sq, hq, d = q.shape
    skv, hkv = k.shape[1], k.shape[2]
    qg = _grouped(q, hkv)  # (B, Hkv, G, Sq, D)
    kt = k.float().permute(0, 2, 3, 1).unsqueeze(2)  # (B, Hkv, 1, D, Skv)
    s = torch.matmul(qg, kt) * (1.0 / math.sqrt(d))  # (B, Hkv, G, Sq, Skv)
    mask = allowed_mask(sq, skv, causal=causal, q_doc=q_doc, kv_doc=kv_doc, device=q.device)
    if mask is not None:
        s = s.masked_fill(~mask.unsqueeze(1), float("-inf"))  # mask (B|1, 1, 1, Sq, Skv)
    if lse is None:
        row_lse = torch.logsumexp(s, dim=-1)  # -inf for rows that see nothing
    else:
        row_lse = lse.float().view(b, hkv, hq // hkv, sq)
    # Rows with lse = -inf see nothing: subtract 0 instead so exp(-inf - 0) = 0 rather than NaN.
    safe = torch.where(torch.isinf(row_lse), torch.zeros_like(row_lse), row_lse)
    p = torch.exp(s - safe.unsqueeze(-1))
    return p, row_lse


def attention_fwd(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    kv_doc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns out (B, Sq, Hq, D) in q's dtype and lse (B, Hq, Sq) float32."""
    b, sq, hq, d = q.shape
    p, lse = _probs(q, k, causal, q_doc, kv_doc, None)
    vg = v.float().permute(0, 2, 1, 3).unsqueeze(2)  # (B, Hkv, 1, Skv, D)
    out = torch.matmul(p, vg)  # (B, Hkv, G, Sq, D)
    out = out.permute(0, 3, 1, 2, 4).reshape(b, sq, hq, d)
    return out.to(q.dtype), lse.reshape(b, hq, sq)


def attention_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    *,
    causal: bool,
    q_doc: torch.Tensor | None = None,
    kv_doc: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """FlashAttention-2 backward (Dao 2023, Alg. 2) with a possibly *global* out and lse.

    dS = P * (dO V^T - delta), delta = rowsum(dO * O); dq = dS K * scale, dk = dS^T Q * scale,
    dv = P^T dO, with dk and dv summed over the G query heads that share a KV head.
    """
    b, sq, hq, d = q.shape
    hkv = k.shape[2]
    scale = 1.0 / math.sqrt(d)
    p, _ = _probs(q, k, causal, q_doc, kv_doc, lse)  # (B, Hkv, G, Sq, Skv)
    do = _grouped(dout, hkv)  # (B, Hkv, G, Sq, D)
    delta = (do * _grouped(out, hkv)).sum(-1, keepdim=True)  # (B, Hkv, G, Sq, 1)
    vg = v.float().permute(0, 2, 1, 3).unsqueeze(2)  # (B, Hkv, 1, Skv, D)
    kg = k.float().permute(0, 2, 1, 3).unsqueeze(2)  # (B, Hkv, 1, Skv, D)
    dp = torch.matmul(do, vg.transpose(-1, -2))  # (B, Hkv, G, Sq, Skv)
    ds = p * (dp - delta)
    dq = torch.matmul(ds, kg) * scale  # (B, Hkv, G, Sq, D)
    dk = torch.matmul(ds.transpose(-1, -2), _grouped(q, hkv)).sum(2) * scale  # (B, Hkv, Skv, D)
    dv = torch.matmul(p.transpose(-1, -2), do).sum(2)  # (B, Hkv, Skv, D)
    dq = dq.permute(0, 3, 1, 2, 4).reshape(b, sq, hq, d)
    return dq.to(q.dtype), dk.transpose(1, 2).to(k.dtype), dv.transpose(1, 2).to(v.dtype)


def merge_partials(
    out_a: torch.Tensor, lse_a: torch.Tensor, out_b: torch.Tensor, lse_b: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Combine the attention of the same queries over two disjoint key blocks (ring attention).

    out_* (B, S, H, D), lse_* (B, H, S) float32. Returns (out, lse) over the union of both blocks,
    out in float32 (callers accumulating several blocks keep fp32 and cast once at the end).
    """
    lse = torch.logaddexp(lse_a, lse_b)  # (B, H, S); -inf only when both are -inf
    safe = torch.where(torch.isinf(lse), torch.zeros_like(lse), lse)
    wa = torch.exp(lse_a - safe).transpose(1, 2).unsqueeze(-1)  # (B, S, H, 1)
    wb = torch.exp(lse_b - safe).transpose(1, 2).unsqueeze(-1)
    return out_a.float() * wa + out_b.float() * wb, lse
