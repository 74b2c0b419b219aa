"""Triton attention backward (FlashAttention-2, Dao 2023, Alg. 2), with three ways to get dQ.

Launches (kernels/attention/triton_launch.py):
  1. preprocess: delta = rowsum(dO * O) - dlse and lse2 = lse * log2(e) (dead rows: +inf, so P = 0),
     both (B, Hq, Sq) fp32. `out` and `lse` may be the *global* ones of a larger attention (ring
     context parallelism calls this per key block); P = exp(s - lse) is then that block's share.
  2. dK/dV: one program per (key block, batch, KV head[, split]) keeps dK, dV (BN, D) in fp32
     registers and loops over (query block, query head) pairs of its GQA group (K/V never
     expanded): dV += P^T dO, dK += dS^T Q with dP = dO V^T, dS = P * (dP - delta) * scale.
  3. dQ, by DQ_ATOMIC:
       0 "recompute": a second kernel, one program per (query block, batch, query head), recomputes
         S and dP: dQ += dS K (7 block matmuls per block pair instead of 5; deterministic);
       1 "atomic": the dK/dV loop adds dS^T K into a zeroed fp32 buffer with element atomics;
       2 "tma_atomic": the same sum through TMA bulk reductions (cp.reduce.async.bulk.tensor, the
         dQ scheme of FlashAttention-3): one asynchronous instruction per (BM, D) tile instead of
         BM * D atomics, so the reduction leaves the math warps' instruction stream.
     1 and 2 do 5 matmuls per pair but are not bitwise reproducible (summation order varies).
Techniques: loops skip fully masked blocks (causal: above the diagonal; documents: outside the
range of triton_blocks.doc_ranges) and split causal work into masked (diagonal, tail) and unmasked
phases; the softmax scale is folded into dS before its bf16 cast (no final rescale of dK/dQ);
S and dP are issued back to back so the dP matmul runs while exp2 computes P; with TMA=True the
streamed operands (Q/dO, or K/V in the dQ kernel) come through 2-D tensor descriptors over
(B * S, H * D), whose tail rows belong to the next batch (or are zero) and are masked out of P.
HEADS_INNER orders the dK/dV loop query-block-major and descending, so the programs of one KV
group that run together read the same Q/dO tile (and add into the same dQ tile) at the same time:
L2 reuse, where head-major order lets them drift apart by whole heads.
"""

from __future__ import annotations

import triton
import triton.language as tl

from kernels.attention.triton_fwd import configs


@triton.jit
def attn_bwd_preprocess_kernel(
    Out, DOut, Lse, DLse, Delta, Lse2,
    stride_ob, stride_os, stride_oh, stride_db, stride_ds, stride_dh,
    Hq, Sq,
    HEAD_DIM: tl.constexpr, HAS_DLSE: tl.constexpr, BLOCK_M: tl.constexpr,
):
    pid_bh = tl.program_id(0)
    b = pid_bh // Hq
    h = pid_bh % Hq
    offs_m = tl.program_id(1) * BLOCK_M + tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    ok = offs_m < Sq
    o = tl.load(Out + b.to(tl.int64) * stride_ob + h.to(tl.int64) * stride_oh
                + offs_m[:, None] * stride_os + offs_d[None, :], mask=ok[:, None], other=0.0)
    do = tl.load(DOut + b.to(tl.int64) * stride_db + h.to(tl.int64) * stride_dh
                 + offs_m[:, None] * stride_ds + offs_d[None, :], mask=ok[:, None], other=0.0)
    row = pid_bh.to(tl.int64) * Sq + offs_m
    delta = tl.sum(o.to(tl.float32) * do.to(tl.float32), 1)
    if HAS_DLSE:
        # d lse / d s = P, so a gradient on lse enters as dS = P * (dP - delta + dlse).
        delta -= tl.load(DLse + row, mask=ok, other=0.0)
    lse = tl.load(Lse + row, mask=ok, other=float("-inf"))
    lse2 = tl.where(lse == float("-inf"), float("inf"), lse * 1.4426950408889634)
    tl.store(Delta + row, delta, mask=ok)
    tl.store(Lse2 + row, lse2, mask=ok)


@triton.jit
def _dkdv_step(
    dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h, start_m,
    offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh, stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh, Hq, Sq, causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
    HEAD_DIM: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr,
    DQ_ATOMIC: tl.constexpr, TMA: tl.constexpr, PREC: tl.constexpr,
):
    """One (query block at start_m, query head h) into dk, dv (BN, D) fp32 (transposed form).

    MASKED=False promises a full query block that sees every key of this block: no masks.
    Key rows past Skv were loaded as zeros, so they add nothing to dQ and their dK/dV rows are
    never stored. Query rows past Sq get P = 0 (lse2 = +inf and the mask), hence dS = 0: with
    TMA their Q/dO rows (another batch's) and their dQ rows (the next head's) are untouched.
    """
    offs_m = start_m + offs_m0  # (BM,)
    q_ok = offs_m < Sq
    row0 = (b * Hq + h).to(tl.int64) * Sq  # first row of (b, h) in lse2 / delta
    if TMA:
        q = DescQ.load([b * Sq + start_m, h * HEAD_DIM])  # (BM, D)
        do = DescDO.load([b * Sq + start_m, h * HEAD_DIM])
    else:
        q_ptrs = (Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                  + offs_m[:, None] * stride_qs + offs_d[None, :])
        do_ptrs = (DOut + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                   + offs_m[:, None] * stride_dos + offs_d[None, :])
        if MASKED:
            q = tl.load(q_ptrs, mask=q_ok[:, None], other=0.0)
            do = tl.load(do_ptrs, mask=q_ok[:, None], other=0.0)
        else:
            q = tl.load(q_ptrs)
            do = tl.load(do_ptrs)
    if MASKED:
        lse2 = tl.load(Lse2 + row0 + offs_m, mask=q_ok, other=float("inf"))
        delta = tl.load(Delta + row0 + offs_m, mask=q_ok, other=0.0)
    else:
        lse2 = tl.load(Lse2 + row0 + offs_m)
        delta = tl.load(Delta + row0 + offs_m)
    s_t = tl.dot(k, tl.trans(q), input_precision=PREC)  # (BN, BM) = S^T
    # Issued before exp2 needs S, so this MMA overlaps the exponentials.
    dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)  # (BN, BM) = dP^T
    p_t = tl.exp2(s_t * qk_scale - lse2[None, :])
    if MASKED:
        keep = q_ok[None, :]
        if CAUSAL:
            keep = keep & (offs_n[:, None] <= offs_m[None, :] + causal_off)
        if HAS_DOC:
            qd = tl.load(qdoc_ptr + offs_m, mask=q_ok, other=-2)
            keep = keep & (k_doc[:, None] == qd[None, :])
        p_t = tl.where(keep, p_t, 0.0)
    dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PREC)
    # The softmax scale enters dS before the cast: dK and dQ need no rescaling afterwards.
    ds_t = (p_t * (dp_t - delta[None, :]) * sm_scale).to(q.dtype)
    dk = tl.dot(ds_t, q, dk, input_precision=PREC)
    if DQ_ATOMIC == 1:
        dq = tl.dot(tl.trans(ds_t), k, input_precision=PREC)  # (BM, D) fp32
        dq_ptrs = (DQAcc + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
                   + offs_m[:, None] * stride_dqs + offs_d[None, :])
        if MASKED:
            tl.atomic_add(dq_ptrs, dq, mask=q_ok[:, None], sem="relaxed")
        else:
            tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    elif DQ_ATOMIC == 2:
        dq = tl.dot(tl.trans(ds_t), k, input_precision=PREC)
        # DescDQ views the (B, Hq, Sq, D) fp32 buffer as (B * Hq * Sq, D).
        DescDQ.atomic_add([(b * Hq + h) * Sq + start_m, 0], dq)
    return dk, dv


@triton.jit
def _dkdv_phase(
    dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0, heads, blk_lo, blk_hi,
    offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh, stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh, Hq, Sq, causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
    HEAD_DIM: tl.constexpr, BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr,
    HAS_DOC: tl.constexpr, DQ_ATOMIC: tl.constexpr, TMA: tl.constexpr, PREC: tl.constexpr,
    HEADS_INNER: tl.constexpr,
):
    """Query blocks [blk_lo, blk_hi) (in BLOCK_M units) x query heads h0 .. h0 + heads - 1, as
    one flat loop (one software pipeline per phase, not one per head)."""
    n_blk = blk_hi - blk_lo
    n = tl.maximum(n_blk, 0) * heads
    for i in tl.range(0, n):
        if HEADS_INNER:  # descending query blocks, heads inner
            blk = blk_hi - 1 - i // heads
            g = i % heads
        else:  # head-major, ascending query blocks
            g = i // n_blk
            blk = blk_lo + i % n_blk
        dk, dv = _dkdv_step(
            dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0 + g,
            blk * BLOCK_M, offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh, stride_dob,
            stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, Hq, Sq, causal_off,
            qdoc_ptr, k_doc, qk_scale, sm_scale,
            HEAD_DIM, MASKED, CAUSAL, HAS_DOC, DQ_ATOMIC, TMA, PREC,
        )
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    Q, K, V, DOut, Lse2, Delta, DK, DV, DQAcc, QDoc, KvDoc, DocLo, DocHi, DescQ, DescDO, DescDQ,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dkb, stride_dks, stride_dkh,
    stride_dvb, stride_dvs, stride_dvh,
    stride_dqb, stride_dqs, stride_dqh,
    stride_qdoc_b, stride_kvdoc_b, stride_tbl_b,
    Hq, Hkv, G, SPLIT, Sq, Skv, n_gran, sm_scale,
    SQ_BUCKET, SKV_BUCKET,  # autotune keys only
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr, GRAN: tl.constexpr,
    DQ_ATOMIC: tl.constexpr, TMA: tl.constexpr, HEADS_INNER: tl.constexpr, PREC: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Grid (B * Hkv * SPLIT, cdiv(Skv, BLOCK_N)); with causal the first key blocks have the most
    # queries, so the natural order is already longest-first. Each program reduces G // SPLIT query
    # heads of its KV head; with SPLIT > 1 (few KV heads, too few programs to fill the GPU) DK/DV
    # are fp32 partials of shape (B, Skv, Hkv * SPLIT, D) that the launcher sums over the split.
    pid = tl.program_id(0)
    split = pid % SPLIT
    b = pid // (Hkv * SPLIT)
    kvh = (pid // SPLIT) % Hkv
    out_h = kvh * SPLIT + split  # head index in DK/DV (== kvh without a split)
    heads = G // SPLIT
    h0 = kvh * G + split * heads
    start_n = tl.program_id(1) * BLOCK_N
    offs_n = start_n + tl.arange(0, BLOCK_N)
    offs_m0 = tl.arange(0, BLOCK_M)
    offs_d = tl.arange(0, HEAD_DIM)
    kv_ok = offs_n < Skv
    k = tl.load(K + b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
                + offs_n[:, None] * stride_ks + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    v = tl.load(V + b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
                + offs_n[:, None] * stride_vs + offs_d[None, :], mask=kv_ok[:, None], other=0.0)
    dk = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    dv = tl.zeros([BLOCK_N, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    causal_off = Skv - Sq
    qdoc_ptr = QDoc + b.to(tl.int64) * stride_qdoc_b

    # Query range: with causal, query i sees key j iff i >= j - off, so start at start_n - off.
    lo = 0
    if CAUSAL:
        lo = tl.maximum(start_n - causal_off, 0)
    lo_blk = lo // BLOCK_M
    end_blk = tl.cdiv(Sq, BLOCK_M)
    if HAS_DOC:
        k_doc = tl.load(KvDoc + b.to(tl.int64) * stride_kvdoc_b + offs_n, mask=kv_ok, other=-3)
        gi = start_n // GRAN + tl.arange(0, BLOCK_N // GRAN)
        g_ok = gi < n_gran
        d_lo = tl.min(tl.load(DocLo + b * stride_tbl_b + gi, mask=g_ok, other=2147483647), 0)
        d_hi = tl.max(tl.load(DocHi + b * stride_tbl_b + gi, mask=g_ok, other=0), 0)
        lo_blk = tl.maximum(lo_blk, d_lo // BLOCK_M)
        end_blk = tl.minimum(end_blk, tl.cdiv(d_hi, BLOCK_M))
        dk, dv = _dkdv_phase(
            dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0, heads,
            lo_blk, end_blk, offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh,
            stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, Hq, Sq,
            causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
            HEAD_DIM, BLOCK_M, True, CAUSAL, True, DQ_ATOMIC, TMA, PREC, HEADS_INNER,
        )
    else:
        k_doc = offs_n
        # Phases in query blocks: masked [lo_blk, mid_blk) holds the blocks some row of which
        # misses a key of this block (i < start_n + BN - 1 - off); unmasked [mid_blk, full_blk);
        # masked tail [full_blk, end_blk) (a partial last block). Run tail first and descend, so
        # with HEADS_INNER programs that start together stay on the same query block.
        mid_blk = lo_blk
        if CAUSAL:
            mid = tl.minimum(tl.maximum(start_n + BLOCK_N - 1 - causal_off, lo_blk * BLOCK_M), Sq)
            mid_blk = tl.cdiv(mid, BLOCK_M)
        full_blk = tl.maximum(Sq // BLOCK_M, mid_blk)
        dk, dv = _dkdv_phase(
            dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0, heads,
            full_blk, end_blk, offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh,
            stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, Hq, Sq,
            causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
            HEAD_DIM, BLOCK_M, True, CAUSAL, False, DQ_ATOMIC, TMA, PREC, HEADS_INNER,
        )
        dk, dv = _dkdv_phase(
            dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0, heads,
            mid_blk, full_blk, offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh,
            stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, Hq, Sq,
            causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
            HEAD_DIM, BLOCK_M, False, CAUSAL, False, DQ_ATOMIC, TMA, PREC, HEADS_INNER,
        )
        dk, dv = _dkdv_phase(
            dk, dv, k, v, Q, DOut, Lse2, Delta, DQAcc, DescQ, DescDO, DescDQ, b, h0, heads,
            lo_blk, mid_blk, offs_n, offs_m0, offs_d, stride_qb, stride_qs, stride_qh,
            stride_dob, stride_dos, stride_doh, stride_dqb, stride_dqs, stride_dqh, Hq, Sq,
            causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
            HEAD_DIM, BLOCK_M, True, CAUSAL, False, DQ_ATOMIC, TMA, PREC, HEADS_INNER,
        )
    tl.store(DK + b.to(tl.int64) * stride_dkb + out_h.to(tl.int64) * stride_dkh
             + offs_n[:, None] * stride_dks + offs_d[None, :], dk.to(DK.dtype.element_ty),
             mask=kv_ok[:, None])
    tl.store(DV + b.to(tl.int64) * stride_dvb + out_h.to(tl.int64) * stride_dvh
             + offs_n[:, None] * stride_dvs + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_ok[:, None])


@triton.jit
def _dq_block_loop(
    dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0, kv_col,
    offs_m, offs_n0, lo, hi, Skv, causal_off, kdoc_ptr, q_doc, qk_scale, sm_scale,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr,
    TMA: tl.constexpr, PREC: tl.constexpr,
):
    """Key blocks [lo, hi) into dq (BM, D) fp32. With TMA a tail block reads rows of the next
    batch (or zeros); the key mask zeroes their P, so they add nothing."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_ok = offs_n < Skv
        if TMA:
            k = DescK.load([kv_row0 + start_n, kv_col])  # (BN, D)
            v = DescV.load([kv_row0 + start_n, kv_col])
        elif MASKED:
            k = tl.load(k_ptrs0 + start_n * stride_ks, mask=kv_ok[:, None], other=0.0)
            v = tl.load(v_ptrs0 + start_n * stride_vs, mask=kv_ok[:, None], other=0.0)
        else:  # full key blocks that every row sees
            k = tl.load(k_ptrs0 + start_n * stride_ks)
            v = tl.load(v_ptrs0 + start_n * stride_vs)
        s = tl.dot(q, tl.trans(k), input_precision=PREC)  # (BM, BN)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # issued before exp2 needs S
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            keep = kv_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_off)
            if HAS_DOC:
                kd = tl.load(kdoc_ptr + offs_n, mask=kv_ok, other=-1)
                keep = keep & (q_doc[:, None] == kd[None, :])
            p = tl.where(keep, p, 0.0)
        ds = p * (dp - delta[:, None]) * sm_scale
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DOut, Lse2, Delta, DQ, QDoc, KvDoc, DocLo, DocHi, DescK, DescV,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh,
    stride_qdoc_b, stride_kvdoc_b, stride_tbl_b,
    Hq, G, Sq, Skv, n_gran, sm_scale,
    SQ_BUCKET, SKV_BUCKET,  # autotune keys only
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr, GRAN: tl.constexpr,
    TMA: tl.constexpr, PREC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
    # Grid (B * Hq, cdiv(Sq, BLOCK_M)): the query heads of a KV group run together and stream the
    # same K/V blocks at the same time (L2 reuse).
    pid_bh = tl.program_id(0)
    pid_m = tl.program_id(1)
    if CAUSAL:
        pid_m = tl.num_programs(1) - 1 - pid_m  # longest first
    b = pid_bh // Hq
    h = pid_bh % Hq
    kvh = h // G
    start_m = pid_m * BLOCK_M
    offs_m = start_m + tl.arange(0, BLOCK_M)
    offs_n0 = tl.arange(0, BLOCK_N)
    offs_d = tl.arange(0, HEAD_DIM)
    q_ok = offs_m < Sq
    q = tl.load(Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                + offs_m[:, None] * stride_qs + offs_d[None, :], mask=q_ok[:, None], other=0.0)
    do = tl.load(DOut + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                 + offs_m[:, None] * stride_dos + offs_d[None, :], mask=q_ok[:, None], other=0.0)
    row = pid_bh.to(tl.int64) * Sq + offs_m
    lse2 = tl.load(Lse2 + row, mask=q_ok, other=float("inf"))
    delta = tl.load(Delta + row, mask=q_ok, other=0.0)
    k_ptrs0 = (K + b.to(tl.int64) * stride_kb + kvh.to(tl.int64) * stride_kh
               + offs_n0[:, None] * stride_ks + offs_d[None, :])
    v_ptrs0 = (V + b.to(tl.int64) * stride_vb + kvh.to(tl.int64) * stride_vh
               + offs_n0[:, None] * stride_vs + offs_d[None, :])
    kv_row0 = b * Skv
    kv_col = kvh * HEAD_DIM
    dq = tl.zeros([BLOCK_M, HEAD_DIM], dtype=tl.float32)
    qk_scale = sm_scale * 1.4426950408889634
    causal_off = Skv - Sq
    hi = Skv
    if CAUSAL:
        hi = tl.minimum(Skv, start_m + BLOCK_M + causal_off)
    if HAS_DOC:
        q_doc = tl.load(QDoc + b.to(tl.int64) * stride_qdoc_b + offs_m, mask=q_ok, other=-2)
        gi = start_m // GRAN + tl.arange(0, BLOCK_M // GRAN)
        g_ok = gi < n_gran
        d_lo = tl.min(tl.load(DocLo + b * stride_tbl_b + gi, mask=g_ok, other=2147483647), 0)
        d_hi = tl.max(tl.load(DocHi + b * stride_tbl_b + gi, mask=g_ok, other=0), 0)
        dq = _dq_block_loop(
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, (d_lo // BLOCK_N) * BLOCK_N, tl.minimum(hi, d_hi), Skv,
            causal_off, KvDoc + b.to(tl.int64) * stride_kvdoc_b, q_doc, qk_scale, sm_scale,
            BLOCK_N, True, CAUSAL, True, TMA, PREC,
        )
    else:
        mid = Skv
        if CAUSAL:
            mid = tl.minimum(Skv, tl.maximum(start_m + causal_off + 1, 0))
        mid = (mid // BLOCK_N) * BLOCK_N
        dq = _dq_block_loop(
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, 0, mid, Skv, causal_off, KvDoc, offs_m, qk_scale, sm_scale,
            BLOCK_N, False, CAUSAL, False, TMA, PREC,
        )
        dq = _dq_block_loop(
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, DescK, DescV, kv_row0,
            kv_col, offs_m, offs_n0, mid, hi, Skv, causal_off, KvDoc, offs_m, qk_scale, sm_scale,
            BLOCK_N, True, CAUSAL, False, TMA, PREC,
        )
    tl.store(DQ + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
             + offs_m[:, None] * stride_dqs + offs_d[None, :], dq.to(DQ.dtype.element_ty),
             mask=q_ok[:, None])


def dkdv_pre_hook(nargs: dict) -> None:
    """Before every (tuning or real) dK/dV launch: zero the dQ accumulator of the atomic modes, so
    autotuning reruns never leave partial sums behind, and size the TMA descriptor blocks."""
    if nargs["DQ_ATOMIC"]:
        nargs["DQAcc"].zero_()
    d, bm = nargs["HEAD_DIM"], nargs["BLOCK_M"]
    if nargs["TMA"]:
        nargs["DescQ"].block_shape = [bm, d]
        nargs["DescDO"].block_shape = [bm, d]
    if nargs["DQ_ATOMIC"] == 2:
        nargs["DescDQ"].block_shape = [bm, d]


def dq_pre_hook(nargs: dict) -> None:
    if nargs["TMA"]:
        d, bn = nargs["HEAD_DIM"], nargs["BLOCK_N"]
        nargs["DescK"].block_shape = [bn, d]
        nargs["DescV"].block_shape = [bn, d]


# (BLOCK_M queries, BLOCK_N keys, warps, stages) for bf16/fp16. dK/dV keeps two (BN, D) fp32
# accumulators, so it favours BN = 128 with short query blocks and 8 warps; dQ mirrors the forward.
# (64, 64, 4, 3) serves short documents. H200 tuned to (64, 128, 8, 2-3) and (128, 64, 8, 3).
DKDV_TILES = [(64, 128, 8, 2), (64, 128, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]
DQ_TILES = [(128, 64, 8, 2), (128, 64, 8, 3), (128, 128, 8, 2), (64, 64, 4, 3)]
# fp32 inputs (a correctness/debug path, see triton_fwd.FWD_TILES_FP32): exact fp32 dots are FMA
# loops with operands in registers. At head dim 128 the tiles above took 19-85 s (dQ) and 59-270 s
# (dK/dV) each to compile for sm_90 with 70-385 KB of spills, and half exceed shared memory. One
# small tile per kernel, not autotuned: 2.1 s (dQ) and 3.9 s (dK/dV), under 1 KB of spills.
DKDV_TILES_FP32 = [(32, 32, 8, 2)]
DQ_TILES_FP32 = [(32, 32, 8, 2)]
_KEY = ["SQ_BUCKET", "SKV_BUCKET", "HEAD_DIM", "CAUSAL", "HAS_DOC", "TMA", "PREC"]
_DKDV_KEY = _KEY + ["DQ_ATOMIC", "HEADS_INNER"]
DKDV_CONFIGS = configs(DKDV_TILES, dkdv_pre_hook)
DQ_CONFIGS = configs(DQ_TILES, dq_pre_hook)
attn_bwd_dkdv_tuned = triton.autotune(configs=DKDV_CONFIGS, key=_DKDV_KEY)(attn_bwd_dkdv_kernel)
attn_bwd_dq_tuned = triton.autotune(configs=DQ_CONFIGS, key=_KEY)(attn_bwd_dq_kernel)
# Single-config objects: no benchmarking, one compile (why separate: triton_fwd, same place).
attn_bwd_dkdv_fp32_tuned = triton.autotune(
    configs=configs(DKDV_TILES_FP32, dkdv_pre_hook), key=_DKDV_KEY)(attn_bwd_dkdv_kernel)
attn_bwd_dq_fp32_tuned = triton.autotune(
    configs=configs(DQ_TILES_FP32, dq_pre_hook), key=_KEY)(attn_bwd_dq_kernel)
