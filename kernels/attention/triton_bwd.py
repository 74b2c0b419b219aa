"""Triton attention backward (FlashAttention-2, Dao 2023, Alg. 2).

Three launches (the default, atomics-free and deterministic):
  1. preprocess: delta = rowsum(dO * O) - dlse and lse2 = lse * log2(e) (dead rows: +inf, so P = 0),
     both (B, Hq, Sq) fp32. `out` and `lse` may be the *global* ones of a larger attention (ring
     context parallelism calls this per key block); P = exp(s - lse) is then that block's share.
  2. dK/dV: one program per (key block, batch, KV head) keeps dK, dV (BN, D) in fp32 registers and
     loops over the G query heads of its group and their query blocks (GQA reduced inside the
     kernel, K/V never expanded): dV += P^T dO, dK += dS^T Q, dS = P * (dP - delta), dP = dO V^T.
  3. dQ: one program per (query block, batch, query head) loops over key blocks: dQ += dS K.
Both loops skip fully masked blocks (causal: above the diagonal; documents: outside the range of
triton_blocks.doc_ranges) and split causal work into masked (diagonal) and unmasked phases.
The dQ kernel recomputes S and dP (7 block matmuls per block pair instead of 5). The ATOMIC_DQ
variant instead adds dS K into a zeroed fp32 buffer with atomics from the dK/dV loop (FA2's CUDA
scheme: 5 matmuls, not bitwise deterministic); kernels/attention/bench.py compares the two.
"""

from __future__ import annotations

import triton
import triton.language as tl


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
def _dkdv_block_loop(
    dk, dv, k, v, q_ptrs0, do_ptrs0, dq_ptrs0, lse_ptr, delta_ptr, stride_qs, stride_dos,
    stride_dqs, offs_n, offs_m0, lo, hi, Sq, causal_off, qdoc_ptr, k_doc, qk_scale, sm_scale,
    BLOCK_M: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr,
    ATOMIC_DQ: tl.constexpr, PREC: tl.constexpr,
):
    """Query blocks [lo, hi) of one query head into dk, dv (BN, D) fp32 (transposed formulation).

    MASKED=False promises full query blocks that see every key of this block: no masks at all.
    Key rows past Skv were loaded as zeros, so they add nothing to dQ and their dK/dV rows are
    never stored. With ATOMIC_DQ, dQ += dS K * scale is also accumulated here (fp32 atomics).
    """
    for start_m in tl.range(lo, hi, BLOCK_M):
        offs_m = start_m + offs_m0  # (BM,)
        q_ok = offs_m < Sq
        if MASKED:
            q = tl.load(q_ptrs0 + start_m * stride_qs, mask=q_ok[:, None], other=0.0)  # (BM, D)
            # Rows past Sq load lse2 = +inf, so their P is 0.
            lse2 = tl.load(lse_ptr + offs_m, mask=q_ok, other=float("inf"))
        else:
            q = tl.load(q_ptrs0 + start_m * stride_qs)
            lse2 = tl.load(lse_ptr + offs_m)
        s_t = tl.dot(k, tl.trans(q), input_precision=PREC)  # (BN, BM) = S^T
        p_t = tl.exp2(s_t * qk_scale - lse2[None, :])
        if MASKED:
            keep = q_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[:, None] <= offs_m[None, :] + causal_off)
            if HAS_DOC:
                qd = tl.load(qdoc_ptr + offs_m, mask=q_ok, other=-2)
                keep = keep & (k_doc[:, None] == qd[None, :])
            p_t = tl.where(keep, p_t, 0.0)
            do = tl.load(do_ptrs0 + start_m * stride_dos, mask=q_ok[:, None], other=0.0)
            delta = tl.load(delta_ptr + offs_m, mask=q_ok, other=0.0)
        else:
            do = tl.load(do_ptrs0 + start_m * stride_dos)  # (BM, D)
            delta = tl.load(delta_ptr + offs_m)
        dv = tl.dot(p_t.to(do.dtype), do, dv, input_precision=PREC)
        dp_t = tl.dot(v, tl.trans(do), input_precision=PREC)  # (BN, BM) = dP^T
        ds_t = (p_t * (dp_t - delta[None, :])).to(q.dtype)
        dk = tl.dot(ds_t, q, dk, input_precision=PREC)
        if ATOMIC_DQ:
            dq = tl.dot(tl.trans(ds_t), k, input_precision=PREC) * sm_scale  # (BM, D)
            dq_ptrs = dq_ptrs0 + start_m * stride_dqs
            if MASKED:
                tl.atomic_add(dq_ptrs, dq, mask=q_ok[:, None], sem="relaxed")
            else:
                tl.atomic_add(dq_ptrs, dq, sem="relaxed")
    return dk, dv


@triton.jit
def attn_bwd_dkdv_kernel(
    Q, K, V, DOut, Lse2, Delta, DK, DV, DQAcc, QDoc, KvDoc, DocLo, DocHi,
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
    ATOMIC_DQ: tl.constexpr, PREC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
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

    # Query range: with causal, query i sees key j iff i >= j - off, so start at start_n - off.
    lo = 0
    if CAUSAL:
        lo = tl.maximum(start_n - causal_off, 0)
    lo = (lo // BLOCK_M) * BLOCK_M
    hi = Sq
    if HAS_DOC:
        k_doc = tl.load(KvDoc + b.to(tl.int64) * stride_kvdoc_b + offs_n, mask=kv_ok, other=-3)
        gi = start_n // GRAN + tl.arange(0, BLOCK_N // GRAN)
        g_ok = gi < n_gran
        d_lo = tl.min(tl.load(DocLo + b * stride_tbl_b + gi, mask=g_ok, other=2147483647), 0)
        d_hi = tl.max(tl.load(DocHi + b * stride_tbl_b + gi, mask=g_ok, other=0), 0)
        lo = tl.maximum(lo, (d_lo // BLOCK_M) * BLOCK_M)
        hi = tl.minimum(hi, d_hi)
        mid = hi
        full_end = hi
    else:
        k_doc = offs_n
        # Phases: masked [lo, mid) holds the query blocks some row of which misses a key of this
        # block (i < start_n + BN - 1 - off); unmasked [mid, full_end); masked tail [.., Sq).
        mid = lo
        if CAUSAL:
            mid = tl.minimum(tl.maximum(start_n + BLOCK_N - 1 - causal_off, lo), hi)
            mid = tl.cdiv(mid, BLOCK_M) * BLOCK_M
        full_end = tl.maximum((Sq // BLOCK_M) * BLOCK_M, mid)
    for g in range(0, heads):
        h = kvh * G + split * heads + g
        bh = b.to(tl.int64) * Hq + h
        q_ptrs0 = (Q + b.to(tl.int64) * stride_qb + h.to(tl.int64) * stride_qh
                   + offs_m0[:, None] * stride_qs + offs_d[None, :])
        do_ptrs0 = (DOut + b.to(tl.int64) * stride_dob + h.to(tl.int64) * stride_doh
                    + offs_m0[:, None] * stride_dos + offs_d[None, :])
        dq_ptrs0 = (DQAcc + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
                    + offs_m0[:, None] * stride_dqs + offs_d[None, :])
        lse_ptr = Lse2 + bh * Sq
        delta_ptr = Delta + bh * Sq
        qdoc_ptr = QDoc + b.to(tl.int64) * stride_qdoc_b
        dk, dv = _dkdv_block_loop(
            dk, dv, k, v, q_ptrs0, do_ptrs0, dq_ptrs0, lse_ptr, delta_ptr, stride_qs, stride_dos,
            stride_dqs, offs_n, offs_m0, lo, mid, Sq, causal_off, qdoc_ptr, k_doc, qk_scale,
            sm_scale, BLOCK_M, True, CAUSAL, HAS_DOC, ATOMIC_DQ, PREC,
        )
        if not HAS_DOC:
            dk, dv = _dkdv_block_loop(
                dk, dv, k, v, q_ptrs0, do_ptrs0, dq_ptrs0, lse_ptr, delta_ptr, stride_qs,
                stride_dos, stride_dqs, offs_n, offs_m0, mid, full_end, Sq, causal_off, qdoc_ptr,
                k_doc, qk_scale, sm_scale, BLOCK_M, False, CAUSAL, False, ATOMIC_DQ, PREC,
            )
            dk, dv = _dkdv_block_loop(
                dk, dv, k, v, q_ptrs0, do_ptrs0, dq_ptrs0, lse_ptr, delta_ptr, stride_qs,
                stride_dos, stride_dqs, offs_n, offs_m0, full_end, Sq, Sq, causal_off, qdoc_ptr,
                k_doc, qk_scale, sm_scale, BLOCK_M, True, CAUSAL, False, ATOMIC_DQ, PREC,
            )
    dk *= sm_scale
    tl.store(DK + b.to(tl.int64) * stride_dkb + out_h.to(tl.int64) * stride_dkh
             + offs_n[:, None] * stride_dks + offs_d[None, :], dk.to(DK.dtype.element_ty),
             mask=kv_ok[:, None])
    tl.store(DV + b.to(tl.int64) * stride_dvb + out_h.to(tl.int64) * stride_dvh
             + offs_n[:, None] * stride_dvs + offs_d[None, :], dv.to(DV.dtype.element_ty),
             mask=kv_ok[:, None])


@triton.jit
def _dq_block_loop(
    dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, offs_m, offs_n0, lo, hi, Skv,
    causal_off, kdoc_ptr, q_doc, qk_scale,
    BLOCK_N: tl.constexpr, MASKED: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr,
    PREC: tl.constexpr,
):
    """Key blocks [lo, hi) into dq (BM, D) fp32."""
    for start_n in tl.range(lo, hi, BLOCK_N):
        offs_n = start_n + offs_n0
        kv_ok = offs_n < Skv
        if MASKED:
            k = tl.load(k_ptrs0 + start_n * stride_ks, mask=kv_ok[:, None], other=0.0)  # (BN, D)
            v = tl.load(v_ptrs0 + start_n * stride_vs, mask=kv_ok[:, None], other=0.0)
        else:  # full key blocks that every row sees
            k = tl.load(k_ptrs0 + start_n * stride_ks)
            v = tl.load(v_ptrs0 + start_n * stride_vs)
        s = tl.dot(q, tl.trans(k), input_precision=PREC)  # (BM, BN)
        p = tl.exp2(s * qk_scale - lse2[:, None])
        if MASKED:
            keep = kv_ok[None, :]
            if CAUSAL:
                keep = keep & (offs_n[None, :] <= offs_m[:, None] + causal_off)
            if HAS_DOC:
                kd = tl.load(kdoc_ptr + offs_n, mask=kv_ok, other=-1)
                keep = keep & (q_doc[:, None] == kd[None, :])
            p = tl.where(keep, p, 0.0)
        dp = tl.dot(do, tl.trans(v), input_precision=PREC)  # (BM, BN)
        ds = p * (dp - delta[:, None])
        dq = tl.dot(ds.to(k.dtype), k, dq, input_precision=PREC)
    return dq


@triton.jit
def attn_bwd_dq_kernel(
    Q, K, V, DOut, Lse2, Delta, DQ, QDoc, KvDoc, DocLo, DocHi,
    stride_qb, stride_qs, stride_qh,
    stride_kb, stride_ks, stride_kh,
    stride_vb, stride_vs, stride_vh,
    stride_dob, stride_dos, stride_doh,
    stride_dqb, stride_dqs, stride_dqh,
    stride_qdoc_b, stride_kvdoc_b, stride_tbl_b,
    Hq, G, Sq, Skv, n_gran, sm_scale,
    SQ_BUCKET, SKV_BUCKET,  # autotune keys only
    HEAD_DIM: tl.constexpr, CAUSAL: tl.constexpr, HAS_DOC: tl.constexpr, GRAN: tl.constexpr,
    PREC: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
):
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
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, offs_m, offs_n0,
            (d_lo // BLOCK_N) * BLOCK_N, tl.minimum(hi, d_hi), Skv, causal_off,
            KvDoc + b.to(tl.int64) * stride_kvdoc_b, q_doc, qk_scale,
            BLOCK_N, True, CAUSAL, True, PREC,
        )
    else:
        mid = Skv
        if CAUSAL:
            mid = tl.minimum(Skv, tl.maximum(start_m + causal_off + 1, 0))
        mid = (mid // BLOCK_N) * BLOCK_N
        dq = _dq_block_loop(
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, offs_m, offs_n0,
            0, mid, Skv, causal_off, KvDoc, offs_m, qk_scale,
            BLOCK_N, False, CAUSAL, False, PREC,
        )
        dq = _dq_block_loop(
            dq, q, do, lse2, delta, k_ptrs0, v_ptrs0, stride_ks, stride_vs, offs_m, offs_n0,
            mid, hi, Skv, causal_off, KvDoc, offs_m, qk_scale,
            BLOCK_N, True, CAUSAL, False, PREC,
        )
    dq *= sm_scale
    tl.store(DQ + b.to(tl.int64) * stride_dqb + h.to(tl.int64) * stride_dqh
             + offs_m[:, None] * stride_dqs + offs_d[None, :], dq.to(DQ.dtype.element_ty),
             mask=q_ok[:, None])


def _zero_dq_acc(nargs: dict) -> None:
    """The atomic-dQ variant accumulates into DQAcc: zero it before every (tuning or real) launch,
    so autotuning reruns never leave partial sums behind."""
    if nargs["ATOMIC_DQ"]:
        nargs["DQAcc"].zero_()


# (BLOCK_M queries, BLOCK_N keys, warps, stages). dK/dV keeps two (BN, D) fp32 accumulators, so it
# favours BN = 128 with short query blocks; dQ mirrors the forward.
DKDV_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s, pre_hook=_zero_dq_acc)
    for bm, bn, w, s in [
        (64, 128, 8, 2), (64, 128, 8, 3), (64, 128, 4, 2), (128, 128, 8, 2), (64, 64, 4, 3),
    ]
]
DQ_CONFIGS = [
    triton.Config({"BLOCK_M": bm, "BLOCK_N": bn}, num_warps=w, num_stages=s)
    for bm, bn, w, s in [
        (128, 64, 8, 2), (128, 64, 8, 3), (128, 64, 4, 3), (128, 128, 8, 2), (64, 64, 4, 3),
    ]
]
_KEY = ["SQ_BUCKET", "SKV_BUCKET", "HEAD_DIM", "CAUSAL", "HAS_DOC", "PREC"]
attn_bwd_dkdv_tuned = triton.autotune(configs=DKDV_CONFIGS, key=_KEY + ["ATOMIC_DQ"])(
    attn_bwd_dkdv_kernel
)
attn_bwd_dq_tuned = triton.autotune(configs=DQ_CONFIGS, key=_KEY)(attn_bwd_dq_kernel)
