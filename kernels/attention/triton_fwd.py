"""Triton attention forward (FlashAttention-2, Dao 2023): out and the per-row log-sum-exp.

One program owns BLOCK_M queries of one (batch, query head) and streams the key/value blocks of its
KV head (GQA: query head h reads KV head h // G; K/V are never expanded). Techniques:
  - online softmax in base 2: log2(e) is folded into the scale, so p = exp2(s * qk_scale - m) costs
    one FMA + exp2 per score; normalisation by the row sum is deferred to the epilogue;
  - causal masks are bottom-right aligned (query i sees key j iff j <= i + Skv - Sq); key blocks
    entirely above the diagonal are never visited, and the loop is split into an unmasked phase
    (blocks fully below the diagonal: no mask arithmetic) and a masked phase (diagonal + tail);
  - document masks loop only over the key range that can share a document with the query block
    (triton_blocks.doc_ranges), masking element-wise;
  - causal launches order query blocks longest-first (the last query block has the most keys), so
    the tail of the grid is short blocks and the SMs drain evenly.
Rows that see no key store out = 0 and lse = -inf.
"""

from __future__ import annotations

import triton
import triton.language as tl

@triton.jit
def _fwd_block_loop(
    acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_ks, stride_vs, desc_k, desc_v, kv_row0, kv_col,
    offs_m, offs_n0, lo, hi, Skv, causal_off, kdoc_ptr, q_doc, qk_scale,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr,
    TMA: tl.constexpr, PREC: tl.constexpr,
):
    """Streams key blocks [lo, hi) into (acc (BM, D) fp32, l_i (BM,), m_i (BM,) in log2 units).

    MASKED=False promises full key blocks that every row sees: no load or score masks at all.
    TMA=True loads K/V through 2-D tensor descriptors over (B * Skv, Hkv * D): a tail block then
    reads rows of the next batch (or zeros at the end), which the key mask below zeroes out in P.
    """
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0  # (BN,)
        kv_ok = offs_n < Skv
        if TMA:
            k = desc_k.load([kv_row0 + start_n, kv_col])  # (BN, D)
        elif MASKED:
            k = tl.load(k_ptrs0 + start_n * stride_ks, mask=kv_ok[:, None], other=0.0)  # (BN, D)
        else:
            k = tl.load(k_ptrs0 + start_n * stride_ks)
        s = tl.dot(q, tl.trans(k), input_precision=PREC)  # (BM, BN) fp32
        if MASKED:
            keep = kv_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_off)
            if HAS_DOC:
                kd = tl.load(kdoc_ptr + offs_n, mask=kv_ok, other=-1)
                keep = keep & (q_doc[:, None] == kd[None, :])
            s = tl.where(keep, s * qk_scale, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(s, 1))
            # A row with no visible key so far keeps m = -inf; subtract 0 there to avoid NaN.
            m_sub = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp2(s - m_sub[:, None])
            alpha = tl.exp2(m_i - m_sub)
        else:
            m_new = tl.maximum(m_i, tl.max(s, 1) * qk_scale)
            p = tl.exp2(s * qk_scale - m_new[:, None])
            alpha = tl.exp2(m_i - m_new)
        if TMA:
            v = desc_v.load([kv_row0 + start_n, kv_col])
        elif MASKED:
            v = tl.load(v_ptrs0 + start_n * stride_vs, mask=kv_ok[:, None], other=0.0)
        else:
            v = tl.load(v_ptrs0 + start_n * stride_vs)
        l_i = l_i * alpha + tl.sum(p, 1)
        acc = tl.dot(p.to(v.dtype), v, acc * alpha[:, None], input_precision=PREC)
        m_i = m_new
    return acc, l_i, m_i


@triton.jit
def attn_fwd_kernel(
    Q, K, V, Out, Lse, QDoc, KvDoc, DocLo, DocHi, DescQ, DescK, DescV,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_ob, stride_os, stride_oh,
    stride_qdoc_b, stride_kvdoc_b, stride_tbl_b,
    Hq, G, Sq, Skv, n_gran, sm_scale,
    SQ_BUCKET, SKV_BUCKET,  # autotune keys only
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr, GRAN: tl.constexpr,
    TMA: tl.constexpr, PREC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Grid (B * Hq, cdiv(Sq, BLOCK_M)); axis 0 varies fastest: a KV group's heads run together.
    # With TMA, DescQ/DescK/DescV are descriptors of the 2-D views (B * S, H * D); else None.
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    n_m = tl.num_programs(1)
    if CAUSAL:
        pid_m = n_m - 1 - pid_m  # longest query blocks (most keys) first
    b = pid_bh // Hq
    h = pid_bh % Hq
    kvh = h // G
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ok = offs_m < Sq

    q_base = Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
    k_base = K + b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
    v_base = V + b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
    if TMA:
        # Rows past Sq come from the next batch (or zeros); they are never stored.
        q = DescQ.load([b * Sq + start_m, h * HEAD_DIM])
    else:
        q = tl.load(q_base + offs_m[:, None] * stride_qs + offs_d[None, :], mask=q_ok[:, None],
                    other=0.0)
    kv_row0 = b * Skv
    kv_col = kvh * HEAD_DIM
    k_ptrs0 = k_base + offs_n0[:, None] * stride_ks + offs_d[None, :]
    v_ptrs0 = v_base + offs_n0[:, None] * stride_vs + offs_d[None, :]

    qk_scale = sm_scale * 1.4426950408889634  # log2(e) folded in: softmax in base 2
    m_i = tl.full([BLOCK_M], float("-inf"), dtype=tl.float32)
    l_i = tl.zeros([BLOCK_M], dtype=tl.float32)
    acc = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    causal_off = Skv - Sq

    # Key range [0, hi): with causal, the last row of the block sees keys up to start_m+BM-1+off.
    hi = Skv
    if CAUSAL:
        hi = tl.minimum(Skv, start_m + BLOCK_M + causal_off)
    if HAS_DOC:
        q_doc = tl.load(QDoc + b.to(tl.int64) * stride_qdoc_b + offs_m, mask=q_ok, other=-2)
        gi = start_m // GRAN + tl.arange(0, BLOCK_M // GRAN)
        g_ok = gi < n_gran
        d_lo = tl.min(tl.load(DocLo + b * stride_tbl_b + gi, mask=g_ok, other=2147483647), 0)
        d_hi = tl.max(tl.load(DocHi + b * stride_tbl_b + gi, mask=g_ok, other=0), 0)
        lo = (d_lo // BLOCK_N) * BLOCK_N
        hi = tl.minimum(hi, d_hi)
        kdoc_ptr = KvDoc + b.to(tl.int64) * stride_kvdoc_b
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, lo, hi, Skv, causal_off, kdoc_ptr, q_doc, qk_scale,
            BLOCK_N, True, CAUSAL, True, TMA, PREC,
        )
    else:
        # Unmasked phase: key blocks that every row of this block sees entirely.
        mid = Skv
        if CAUSAL:
            mid = tl.minimum(Skv, tl.maximum(start_m + causal_off + 1, 0))
        mid = (mid // BLOCK_N) * BLOCK_N
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, 0, mid, Skv, causal_off, KvDoc, offs_m, qk_scale,
            BLOCK_N, False, CAUSAL, False, TMA, PREC,
        )
        # Masked phase: the diagonal blocks and the key tail.
        acc, l_i, m_i = _fwd_block_loop(
            acc, l_i, m_i, q, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, mid, hi, Skv, causal_off, KvDoc, offs_m, qk_scale,
            BLOCK_N, True, CAUSAL, False, TMA, PREC,
        )

    # Epilogue: deferred normalisation; rows without keys (l = 0) give out 0 and lse -inf.
    dead = l_i == 0.0
    l_safe = tl.where(dead, 1.0, l_i)
    out = acc / l_safe[:, None]
    lse = tl.where(dead, float("-inf"), (m_i + tl.log2(l_safe)) * 0.6931471805599453)
    o_base = Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
    tl.store(o_base + offs_m[:, None] * stride_os + offs_d[None, :], out.to(Out.dtype.element_ty),
             mask=q_ok[:, None])
    tl.store(Lse + pid_bh.to(tl.int64) * Sq + offs_m, lse, mask=q_ok)


# Tile configs for H100/H200 (hdim 64/128), (BLOCK_M, BLOCK_N, warps, stages): few enough to tune
# in seconds. Measured on H200 (docs/perf/2026-11-30_h200_attention.txt): pointer loads tuned to
# (128, 64, 8, 3), TMA loads to (64, 64, 4, 3). They serve bf16 and fp16 inputs.
FWD_TILES = [(128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (128, 128, 8, 3), (64, 64, 4, 3)]
# fp32 inputs are a correctness/debug path (reference-like math), not a speed path. Their dots run
# with PREC "ieee", which has no tensor-core instruction: Triton lowers each tl.dot to FMAs with
# whole operand rows in registers. At head dim 128 the tiles above then spill 8-140 KB per thread,
# take 11-60 s each to compile for sm_90 (bf16: 1-2 s), and three need 256-384 KiB of shared
# memory, more than an SM has. One small tile, not autotuned: 8 warps keep the per-thread FMA
# tile small (1.3-1.6 s to compile, < 1.3 KB of spills). Numbers and how to measure them
# without a GPU: `python -m kernels.attention.triton_aot`. Blocks are multiples of
# triton_blocks.GPU_GRANULE_FP32.
FWD_TILES_FP32 = [(32, 32, 8, 2)]


def set_tma_blocks(nargs: dict) -> None:
    """Descriptor block shapes follow the config's tile sizes (a config pre_hook)."""
    if nargs["TMA"]:
        d = nargs["HEAD_DIM"]
        nargs["DescQ"].block_shape = [nargs["BLOCK_M"], d]
        nargs["DescK"].block_shape = [nargs["BLOCK_N"], d]
        nargs["DescV"].block_shape = [nargs["BLOCK_N"], d]


def configs(tiles: list[tuple[int, int, int, int]], pre_hook=None) -> list[triton.Config]:
    """(BLOCK_M, BLOCK_N, warps, stages) tiles -> autotuner configs."""
    return [triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s,
                          pre_hook=pre_hook) for bm, bn, w, s in tiles]


FWD_CONFIGS = configs(FWD_TILES)
_KEY = ["SQ_BUCKET", "SKV_BUCKET", "HEAD_DIM", "CAUSAL", "HAS_DOC", "TMA", "PREC"]
attn_fwd_tuned = triton.autotune(configs=FWD_CONFIGS, key=_KEY)(attn_fwd_kernel)
attn_fwd_tma_tuned = triton.autotune(configs=configs(FWD_TILES, set_tma_blocks), key=_KEY)(
    attn_fwd_kernel)
# Separate single-config objects for fp32: Triton's autotuner skips benchmarking (and compiles
# nothing else) only when an object holds one config (3.6 benchmarks even a single pruned one).
attn_fwd_fp32_tuned = triton.autotune(configs=configs(FWD_TILES_FP32), key=_KEY)(attn_fwd_kernel)
attn_fwd_tma_fp32_tuned = triton.autotune(configs=configs(FWD_TILES_FP32, set_tma_blocks),
                                          key=_KEY)(attn_fwd_kernel)
