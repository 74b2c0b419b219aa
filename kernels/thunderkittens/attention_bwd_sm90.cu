// Attention backward for Hopper (sm_90a) on ThunderKittens tiles: the FlashAttention-2 backward
// (Dao 2023, Alg. 2) with FlashAttention-3's structure (Shah et al. 2024), bf16 gradients.
//
// Three kernels, all on `stream`, no host synchronisation:
//   1. prep: delta = rowsum(dO * O) (- dlse, the gradient flowing into lse, when given: it adds
//      dlse * P to dS) and lse2 = lse * log2(e) into (B, Hq, Sp) buffers (Sp = Sq
//      rounded up to 64; padded rows get delta 0, lse2 +inf, so their P is exactly 0), and zero the
//      fp32 dQ accumulator.
//   2. main: CTA = one (KV head, batch, block of 128 keys); 3 warpgroups. The producer loads K, V
//      once, then streams (Q, dO, lse2, delta) tiles of 64 queries for every query head of the GQA
//      group and every query tile the keys can see (causal: from the diagonal on) through a 2-stage
//      TMA ring. Each consumer owns 64 keys and accumulates dK, dV (64 x D fp32) over the whole
//      group in registers:
//         S^T = K Q^T, dP^T = V dO^T                      (wgmma from shared memory)
//         P^T = exp2(S^T * scale * log2e - lse2), dS^T = P^T * (dP^T - delta)
//         dV += P^T dO, dK += dS^T Q                       (wgmma, P^T / dS^T from registers)
//      dS^T goes to shared memory (double buffered, handed over with mbarriers); one iteration
//      later each consumer computes half of dQ's columns, dQ[:, half] = dS K[:, half] (D = 64:
//      consumer 0 does all), and adds it to the fp32 accumulator with a TMA reduce-add
//      (cp.reduce.async.bulk .add).
//      dK (times the softmax scale) and dV leave as bf16 through TMA stores.
//   3. dq = bf16(dq_acc * scale).
// dQ's accumulator is not bitwise deterministic (the order of the reduce-adds varies).
//
// Variant DQ_RED (attn_bwd's variant = 1, opt-in): dQ goes from the registers straight to the fp32
// accumulator with vector reductions (red.global.add.v2.f32, 16 per thread per iteration) instead
// of stmatrix into a staging tile, a fence, two warpgroup barriers and a TMA reduce-add. Why: at
// 64 x 64 tiles three of the five wgmmas read both operands from shared memory, which puts the
// kernel near the SM's 128 B/clock shared-memory bandwidth; the staging tile's write plus the TMA's
// read are 64 KiB of a CTA iteration's ~370 KiB of shared-memory traffic, and the barriers make the
// warpgroup wait for its slowest warp every iteration.
//
// Where the time goes (docs/benchmarks.md section 4a, with the patches of the experiments): dQ is a
// fifth of the FLOPs but about a third of the time. Its reduce-adds and the Q / dO loads miss L2
// far more often than cuDNN's, but an order that fixed that (94% hits) left the time unchanged: the
// limit is the schedule (dQ wgmmas, wait for all, staging, then the next S^T / dP^T). Both orders
// tried that overlap those steps spilled registers and ran slower. (A wgmma's asm reads its
// accumulator, "+f", so a tile declared outside a loop stays live unless zeroed before its wgmma.)
#include "attention_common.cuh"
#include "tk_kernels.h"

#include <algorithm>
#include <cmath>

namespace titankit_tk {
namespace attn {

constexpr int BWD_CONSUMERS = 2;
constexpr int BWD_THREADS = (BWD_CONSUMERS + 1) * 128;
constexpr int BWD_KV = 64;   // keys per consumer
constexpr int BWD_Q = 64;    // queries per tile
constexpr int BWD_STAGES = 2;
constexpr int BWD_KV_BLOCK = BWD_CONSUMERS * BWD_KV;
constexpr int BAR_DS = 3;    // named barrier of both consumers (ids 1, 2: one warpgroup each)

inline int padded_len(int sq) { return (sq + BWD_Q - 1) / BWD_Q * BWD_Q; }

template <int D>
struct bwd_cfg {
    static constexpr bool SPLIT_DQ = D == 128;  // each consumer computes 64 of dQ's 128 columns
    static constexpr int DQ_COLS = SPLIT_DQ ? D / 2 : D;
    using q_tile = seq_tile<BWD_Q, D>;
    using kv_tile = seq_tile<BWD_KV, D>;
    using ds_tile = st_bf<BWD_KV, BWD_Q>;  // dS^T: keys x queries
    using dq_tile = st_fl<BWD_Q, DQ_COLS>;
    using vec = sv_fl<BWD_Q>;
    using q_gl = bshd_gl<q_tile>;
    using kv_gl = bshd_gl<kv_tile>;
    using dq_gl = gl<float, -1, -1, -1, -1, tma::descriptor<dq_tile, dim::DEPTH>>;
    using vec_gl = gl<float, 1, -1, -1, -1, vec>;  // (1, B, Hq, Sp)
    static constexpr int SMEM = 2 * BWD_CONSUMERS * sizeof(kv_tile)     // K, V
                                + 2 * BWD_STAGES * sizeof(q_tile)       // Q, dO
                                + 2 * BWD_CONSUMERS * sizeof(ds_tile)   // dS^T, double buffered
                                + BWD_CONSUMERS * sizeof(dq_tile)       // dQ staging
                                + 2 * 1024                              // lse2, delta (aligned)
                                + 1024;  // the allocator's 1024-byte alignment of the start
    static_assert(SMEM <= MAX_SHARED_MEMORY - 1024, "backward tiles exceed shared memory");
    static_assert(BWD_STAGES * sizeof(vec) <= 1024, "lse2 / delta stages exceed their allocation");
};

template <int D>
struct bwd_globals {
    typename bwd_cfg<D>::q_gl q, dout;
    typename bwd_cfg<D>::kv_gl k, v, dk, dv;
    typename bwd_cfg<D>::dq_gl dq_acc, dk_acc, dv_acc;  // dk_acc, dv_acc: split > 1 only
    typename bwd_cfg<D>::vec_gl lse2, delta;
    int sq, skv, group, split;  // split: CTAs sharing one (KV head, key block), see kv_split
};

// How many CTAs share the query heads of one (KV head, key block). One CTA per pair leaves SMs idle
// when there are few KV heads (Llama-3 70B under TP 8 has one: 64 CTAs at S = 8192 on 132 SMs);
// then each CTA takes G / split of the group's query heads and adds its fp32 dK / dV partials
// into accumulators with TMA reduce-adds. split divides G and stops at two CTAs per SM.
inline int kv_split(int b, int hq, int hkv, int skv, int sms) {
    const int g = hq / hkv;
    const long ctas = (long)b * hkv * ((skv + BWD_KV_BLOCK - 1) / BWD_KV_BLOCK);
    int split = 1;
    while (ctas * split < 2L * sms && split < g) {
        split++;
        while (g % split) split++;
    }
    return split;
}

// ---------------------------------------------------------------------------------------------
// 1. delta, lse2, zeroed dQ accumulator. One row (b, s, h) per 8 threads, D / 8 elements each.
template <int D>
__global__ void prep_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ out,
                            const float* __restrict__ lse, const float* __restrict__ dlse,
                            float* __restrict__ delta,
                            float* __restrict__ lse2, float* __restrict__ dq_acc, int b, int sq,
                            int sp, int hq) {
    constexpr int PER = D / 8;  // 16 (D = 128) or 8 (D = 64) elements per thread
    const long row = (long)blockIdx.x * (blockDim.x / 8) + threadIdx.x / 8;  // over (b, s, h), s < Sp
    const int part = threadIdx.x % 8;
    // No early return: the shuffles below need every lane of the warp.
    const bool valid = row < (long)b * sp * hq;
    const int h = row % hq;
    const int s = (row / hq) % sp;
    const long bi = row / ((long)hq * sp);
    float acc = 0.f;
    if (valid && s < sq) {
        const long off = ((bi * sq + s) * hq + h) * D + part * PER;
#pragma unroll
        for (int i = 0; i < PER; i += 8) {
            const uint4 a = *reinterpret_cast<const uint4*>(dout + off + i);
            const uint4 o = *reinterpret_cast<const uint4*>(out + off + i);
            const bf16_2* a2 = reinterpret_cast<const bf16_2*>(&a);
            const bf16_2* o2 = reinterpret_cast<const bf16_2*>(&o);
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const float2 af = __bfloat1622float2(a2[j]), of = __bfloat1622float2(o2[j]);
                acc += af.x * of.x + af.y * of.y;
            }
        }
        float4* dq = reinterpret_cast<float4*>(dq_acc + off);
#pragma unroll
        for (int i = 0; i < PER / 4; i++) dq[i] = make_float4(0.f, 0.f, 0.f, 0.f);
    }
    acc += __shfl_xor_sync(0xffffffffu, acc, 1);
    acc += __shfl_xor_sync(0xffffffffu, acc, 2);
    acc += __shfl_xor_sync(0xffffffffu, acc, 4);
    if (valid && part == 0) {
        const long v = (bi * hq + h) * sp + s;
        const float dl = (s < sq && dlse != nullptr) ? dlse[(bi * hq + h) * sq + s] : 0.f;
        delta[v] = s < sq ? acc - dl : 0.f;
        lse2[v] = s < sq ? lse[(bi * hq + h) * sq + s] * LOG2E : __builtin_huge_valf();
    }
}

// ---------------------------------------------------------------------------------------------
// 2. dK, dV and the dQ accumulation.

// Per-column values of a 16 x 64 fragment from a shared vector: pair [j][h] holds columns
// 16 j + 8 h + 2 (lane % 4) + {0, 1}. (TK's generic vector load indexes registers with the lane
// id, which puts them in local memory; these are eight broadcast 8-byte shared loads.)
template <typename RV, typename SV>
__device__ inline void load_cols(RV& dst, const SV& src) {
    const int c = 2 * (laneid() % 4);
#pragma unroll
    for (int j = 0; j < RV::outer_dim; j++) {
        dst.data[j][0] = *reinterpret_cast<const float2*>(&src.data[16 * j + c]);
        dst.data[j][1] = *reinterpret_cast<const float2*>(&src.data[16 * j + 8 + c]);
    }
}

// dQ partial of this warp (16 queries x 16 * width columns, fp32) added into dq_acc (B, Sq, Hq, D)
// at query tile qt, head h, first column col0; rows past Sq are dropped (TMA would clip them).
template <int D, typename RT>
__device__ inline void red_dq(float* acc, const RT& dq, int b, int sq, int hq, int qt, int h,
                              int col0) {
    const int row0 = qt * BWD_Q + warpgroup::warpid() * 16;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        const int row = row0 + frag_row(k);
        if (row >= sq) continue;
        float* p = acc + (((size_t)b * sq + row) * hq + h) * D + col0 + frag_col(k);
#pragma unroll
        for (int j = 0; j < RT::width; j++) {
            const float2 v = dq.tiles[0][j].data[k];
            asm volatile("red.global.add.v2.f32 [%0], {%1, %2};\n" ::"l"(p + 16 * j), "f"(v.x),
                         "f"(v.y)
                         : "memory");
        }
    }
}

template <int D, bool CAUSAL, bool DQ_RED>
__global__ __launch_bounds__(BWD_THREADS, 1) void bwd_kernel(const __grid_constant__ bwd_globals<D> g) {
    using C = bwd_cfg<D>;
    using q_tile = typename C::q_tile;
    using kv_tile = typename C::kv_tile;
    using ds_tile = typename C::ds_tile;
    using dq_tile = typename C::dq_tile;
    using vec = typename C::vec;

    extern __shared__ alignment_dummy smem[];
    tma_swizzle_allocator al((int*)&smem[0]);
    kv_tile(&k_s)[BWD_CONSUMERS] = al.allocate<kv_tile, BWD_CONSUMERS>();
    kv_tile(&v_s)[BWD_CONSUMERS] = al.allocate<kv_tile, BWD_CONSUMERS>();
    q_tile(&q_s)[BWD_STAGES] = al.allocate<q_tile, BWD_STAGES>();
    q_tile(&do_s)[BWD_STAGES] = al.allocate<q_tile, BWD_STAGES>();
    ds_tile(&ds_s)[2][BWD_CONSUMERS] = al.allocate<ds_tile, 2, BWD_CONSUMERS>();
    dq_tile(&dq_s)[BWD_CONSUMERS] = al.allocate<dq_tile, BWD_CONSUMERS>();
    vec(&lse_s)[BWD_STAGES] = al.allocate<vec, BWD_STAGES>();
    vec(&delta_s)[BWD_STAGES] = al.allocate<vec, BWD_STAGES>();
    __shared__ semaphore kv_full, qo_full[BWD_STAGES], qo_free[BWD_STAGES], ds_full[2], ds_free[2];

    const int hkv = blockIdx.x / g.split, b = blockIdx.y, kvb = blockIdx.z;  // kvb 0: heaviest
    const int heads = g.group / g.split;                     // query heads of this CTA
    const int h0 = hkv * g.group + (blockIdx.x % g.split) * heads;
    const int wg = warpgroup::groupid();
    const int n_qt = (g.sq + BWD_Q - 1) / BWD_Q;
    const int qt_first = CAUSAL ? kvb * BWD_KV_BLOCK / BWD_Q : 0;  // Sq == Skv when causal
    const int per_head = n_qt - qt_first;
    const int iters = heads * per_head;

    if (threadIdx.x == 0) {
        init_semaphore(kv_full, 0, 1);
        for (int s = 0; s < BWD_STAGES; s++) {
            init_semaphore(qo_full[s], 0, 1);
            init_semaphore(qo_free[s], BWD_CONSUMERS * 4, 0);  // one per consumer warp
        }
        for (int s = 0; s < 2; s++) {
            init_semaphore(ds_full[s], BWD_CONSUMERS * 4, 0);
            init_semaphore(ds_free[s], BWD_CONSUMERS * 4, 0);
        }
    }
    __syncthreads();

    if (wg == BWD_CONSUMERS) {  // producer
        warpgroup::decrease_registers<24>();
        if (warpgroup::laneid() == 0) {
            tma::expect_bytes(kv_full, 2 * BWD_CONSUMERS * sizeof(kv_tile));
            for (int c = 0; c < BWD_CONSUMERS; c++) {
                load_seq_tile(k_s[c], g.k, b, kvb * BWD_CONSUMERS + c, hkv, kv_full);
                load_seq_tile(v_s[c], g.v, b, kvb * BWD_CONSUMERS + c, hkv, kv_full);
            }
            for (int it = 0; it < iters; it++) {
                const int s = it % BWD_STAGES;
                const int h = h0 + it / per_head, qt = qt_first + it % per_head;
                if (it >= BWD_STAGES) wait(qo_free[s], ((it / BWD_STAGES) - 1) & 1);
                tma::expect_bytes(qo_full[s], 2 * sizeof(q_tile) + 2 * sizeof(vec));
                load_seq_tile(q_s[s], g.q, b, qt, h, qo_full[s]);
                load_seq_tile(do_s[s], g.dout, b, qt, h, qo_full[s]);
                tma::load_async(lse_s[s], g.lse2, {b, h, qt}, qo_full[s]);
                tma::load_async(delta_s[s], g.delta, {b, h, qt}, qo_full[s]);
            }
        }
        return;
    }

    warpgroup::increase_registers<240>();
    const float scale = rsqrtf((float)D), sl2 = scale * LOG2E;
    const int kv0 = kvb * BWD_KV_BLOCK + wg * BWD_KV;  // first key of this consumer
    const int krow0 = kv0 + warpgroup::warpid() * 16;  // first key of this warp
    const bool kv_tail = kv0 + BWD_KV > g.skv;

    rt_fl<16, D> dk, dv;
    warp::zero(dk);
    warp::zero(dv);
    wait(kv_full, 0);

    // dQ of iteration `it` needs both consumers' halves of dS^T. It is issued one iteration later,
    // after this consumer's own dV/dK wgmmas, so the consumers hand dS^T over through mbarriers
    // (ds_full / ds_free, double buffered) and never wait in lockstep for each other's softmax.
    auto dq_step = [&](int it) {
        const int buf = it % 2;
        const int h = h0 + it / per_head, qt = qt_first + it % per_head;
        wait(ds_full[buf], (it / 2) & 1);
        if (C::SPLIT_DQ || wg == 0) {
            // dQ[:, cols] = dS K[:, cols] = sum over the two key halves of (dS^T half)^T K half.
            rt_fl<16, C::DQ_COLS> dq;
            const int part = C::SPLIT_DQ ? wg : 0;
            warpgroup::mm_AtB(dq, ds_s[buf][0], k_s[0].template subtile<C::DQ_COLS>(part));
            warpgroup::mma_AtB(dq, ds_s[buf][1], k_s[1].template subtile<C::DQ_COLS>(part));
            if constexpr (DQ_RED) {
                warpgroup::mma_async_wait();  // also retires this iteration's dV / dK wgmmas
                warp::arrive(ds_free[buf]);
                red_dq<D>(g.dq_acc.raw_ptr, dq, b, g.sq, g.dq_acc.rows(), qt, h,
                          part * C::DQ_COLS);
                return;
            }
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();  // staging tile free
            warpgroup::sync(wg + 1);
            warpgroup::mma_async_wait();  // also retires this iteration's dV / dK wgmmas
            warp::arrive(ds_free[buf]);
            warpgroup::store(dq_s[wg], dq);
            detail::fence_async_shared();
            warpgroup::sync(wg + 1);
            if (warpgroup::laneid() == 0) {
                tma::store_add_async<dim::DEPTH, cache_policy::NORMAL>(
                    g.dq_acc, dq_s[wg], coord<dq_tile>(b, qt, h, part));
            }
        } else {
            warp::arrive(ds_free[buf]);  // D = 64: consumer 1 computes no dQ
        }
    };

    for (int it = 0; it < iters; it++) {
        const int s = it % BWD_STAGES, buf = it % 2;
        const int qt = qt_first + it % per_head;
        const int q0 = qt * BWD_Q;
        wait(qo_full[s], (it / BWD_STAGES) & 1);

        rt_fl<16, BWD_Q> st, dpt;  // S^T and dP^T: this warp's 16 keys x 64 queries
        warpgroup::mm_ABt(st, k_s[wg], q_s[s]);
        warpgroup::mm_ABt(dpt, v_s[wg], do_s[s]);
        typename rt_fl<16, BWD_Q>::row_vec lse2, delta;  // per query (column)
        load_cols(lse2, lse_s[s]);
        load_cols(delta, delta_s[s]);
        warpgroup::mma_async_wait();

        // P^T = exp2(S^T * scale * log2e - lse2): padded queries have lse2 = +inf -> 0.
        warp::mul(st, st, sl2);
        warp::sub_col(st, st, lse2);
        if ((CAUSAL && q0 < krow0 + 15) || kv_tail) {
            // Transposed mask: row = key, column = query; hide key > query and keys past Skv.
#pragma unroll
            for (int j = 0; j < BWD_Q / 16; j++) {
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    const int key = krow0 + frag_row(k), qry = q0 + j * 16 + frag_col(k);
                    float2& v = st.tiles[0][j].data[k];
                    if ((CAUSAL && key > qry) || key >= g.skv) v.x = NEG_INF;
                    if ((CAUSAL && key > qry + 1) || key >= g.skv) v.y = NEG_INF;
                }
            }
        }
        warp::exp2(st, st);
        warp::sub_col(dpt, dpt, delta);
        warp::mul(dpt, dpt, st);  // dS^T = P^T * (dP^T - delta)

        rt_bf<16, BWD_Q> p_bf, ds_bf;
        warp::copy(p_bf, st);
        warp::copy(ds_bf, dpt);
        warpgroup::mma_AB(dv, p_bf, do_s[s]);  // dV += P^T dO
        warpgroup::mma_AB(dk, ds_bf, q_s[s]);  // dK += dS^T Q
        // dS^T into its buffer once both consumers' dQ wgmmas of iteration it - 2 read it.
        if (it >= 2) wait(ds_free[buf], ((it - 2) / 2) & 1);
        warpgroup::store(ds_s[buf][wg], ds_bf);
        detail::fence_async_shared();
        __syncwarp();  // the whole warp's stores and fences before lane 0's (release) arrival
        warp::arrive(ds_full[buf]);
        if (it >= 1) dq_step(it - 1);
        warpgroup::mma_async_wait();
        warp::arrive(qo_free[s]);  // this warp no longer reads Q, dO, lse2, delta of the stage
    }
    if (iters > 0) dq_step(iters - 1);

    // dK = scale * sum dS^T Q. Once neither consumer's dQ wgmmas read K any more (each waited
    // for its own before this barrier), dK and dV leave as bf16 through the K and V tiles, or,
    // when several CTAs share the key block, are added in fp32 through the dQ staging tile.
    asm volatile("bar.sync %0, %1;\n" ::"n"(BAR_DS), "n"(BWD_CONSUMERS * 128));
    warp::mul(dk, dk, scale);
    const int kt = kvb * BWD_CONSUMERS + wg;  // this consumer's 64-key tile
    if (g.split == 1) {
        warpgroup::store(k_s[wg], dk);
        warpgroup::store(v_s[wg], dv);
        detail::fence_async_shared();
        warpgroup::sync(wg + 1);
        if (warpgroup::laneid() == 0) {
            store_seq_tile(g.dk, k_s[wg], b, kt, hkv);
            store_seq_tile(g.dv, v_s[wg], b, kt, hkv);
        }
    } else {
        constexpr int PARTS = D / C::DQ_COLS;  // column slices of the staging tile's width
#pragma unroll
        for (int t = 0; t < 2 * PARTS; t++) {
            rt_fl<16, D>& src = t < PARTS ? dk : dv;
            auto& part = *reinterpret_cast<rt_fl<16, C::DQ_COLS>*>(
                &src.tiles[0][(t % PARTS) * C::DQ_COLS / 16]);
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
            warpgroup::sync(wg + 1);
            warpgroup::store(dq_s[wg], part);
            detail::fence_async_shared();
            warpgroup::sync(wg + 1);
            if (warpgroup::laneid() == 0) {
                tma::store_add_async<dim::DEPTH, cache_policy::NORMAL>(
                    t < PARTS ? g.dk_acc : g.dv_acc, dq_s[wg], coord<dq_tile>(b, kt, hkv, t % PARTS));
            }
        }
    }
    if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
}

// ---------------------------------------------------------------------------------------------
// 3. dq = bf16(dq_acc * scale) (and dk, dv from their accumulators when split > 1).
__global__ void dq_convert_kernel(const float4* __restrict__ acc, bf16_2* __restrict__ dq, long n4,
                                  float scale) {
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += (long)gridDim.x * blockDim.x) {
        const float4 v = acc[i];
        dq[2 * i] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
        dq[2 * i + 1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
    }
}

template <int D>
void run_bwd(const void* dout, const void* q, const void* k, const void* v, const void* out,
             const float* lse, const float* dlse, float* delta, float* lse2, float* dq_acc,
             float* dkv_acc, void* dq, void* dk, void* dv, int b, int sq, int skv, int hq, int hkv,
             bool causal, bool dq_red, cudaStream_t stream) {
    using C = bwd_cfg<D>;
    const int sp = padded_len(sq);
    const int split = kv_split(b, hq, hkv, skv, detail::num_sms());
    const size_t kv_elems = (size_t)b * skv * hkv * D;
    detail::require(split == 1 || dkv_acc != nullptr,
                    "attention backward: the dK/dV accumulator workspace is missing");
    if (split > 1) {
        detail::check_cuda(cudaMemsetAsync(dkv_acc, 0, 2 * kv_elems * sizeof(float), stream),
                           "attention backward dK/dV accumulator zeroing");
    }
    {
        const long rows = (long)b * sp * hq;
        const int threads = 256;
        const long blocks = (rows * 8 + threads - 1) / threads;
        prep_kernel<D><<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const bf16*>(dout), reinterpret_cast<const bf16*>(out), lse, dlse,
            delta, lse2, dq_acc, b, sq, sp, hq);
        detail::check_cuda(cudaGetLastError(), "attention backward prep launch");
    }
    // fp32 (B, Skv, Hkv, D) dK / dV accumulators; with split == 1 they are never touched and only
    // need a valid descriptor, so they point at dq_acc with a one-row shape.
    auto acc_gl = [&](float* p) {
        return split > 1 ? typename C::dq_gl{p, (size_t)b, (size_t)skv, (size_t)hkv, (size_t)D}
                         : typename C::dq_gl{p, 1, 1, 1, (size_t)D};
    };
    bwd_globals<D> g{make_bshd<typename C::q_gl>(q, b, sq, hq, D),
                     make_bshd<typename C::q_gl>(dout, b, sq, hq, D),
                     make_bshd<typename C::kv_gl>(k, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(v, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(dk, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(dv, b, skv, hkv, D),
                     typename C::dq_gl{dq_acc, (size_t)b, (size_t)sq, (size_t)hq, (size_t)D},
                     acc_gl(split > 1 ? dkv_acc : dq_acc),
                     acc_gl(split > 1 ? dkv_acc + kv_elems : dq_acc),
                     typename C::vec_gl{lse2, nullptr, (size_t)b, (size_t)hq, (size_t)sp},
                     typename C::vec_gl{delta, nullptr, (size_t)b, (size_t)hq, (size_t)sp},
                     sq, skv, hq / hkv, split};
    dim3 grid(hkv * split, b, (skv + BWD_KV_BLOCK - 1) / BWD_KV_BLOCK);
    auto launch = [&](auto kernel) {
        detail::set_smem(kernel, C::SMEM);
        kernel<<<grid, BWD_THREADS, C::SMEM, stream>>>(g);
    };
    if (causal && dq_red) launch(bwd_kernel<D, true, true>);
    else if (causal) launch(bwd_kernel<D, true, false>);
    else if (dq_red) launch(bwd_kernel<D, false, true>);
    else launch(bwd_kernel<D, false, false>);
    detail::check_cuda(cudaGetLastError(), "attention backward launch");
    auto convert = [&](const float* acc, void* out, long n, float scale) {
        const long n4 = n / 4;  // D is a multiple of 4
        const int blocks = (int)std::min<long>((n4 + 255) / 256, 65535L * 4);
        dq_convert_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(acc),
                                                       reinterpret_cast<bf16_2*>(out), n4, scale);
        detail::check_cuda(cudaGetLastError(), "attention backward conversion launch");
    };
    convert(dq_acc, dq, (long)b * sq * hq * D, 1.f / std::sqrt((float)D));
    if (split > 1) {
        convert(dkv_acc, dk, (long)kv_elems, 1.f);
        convert(dkv_acc + kv_elems, dv, (long)kv_elems, 1.f);
    }
}

}  // namespace attn

int attn_bwd_padded_len(int sq) { return attn::padded_len(sq); }

int attn_bwd_kv_split(int b, int hq, int hkv, int skv) {
    return attn::kv_split(b, hq, hkv, skv, detail::num_sms());
}

void attn_bwd(const void* dout, const void* q, const void* k, const void* v, const void* out,
              const float* lse, const float* dlse, float* delta, float* lse2, float* dq_acc,
              float* dkv_acc, void* dq, void* dk, void* dv, int b, int sq, int skv, int hq,
              int hkv, int d, bool causal, int variant, cudaStream_t stream) {
    detail::require(variant == ATTN_BWD_DEFAULT || variant == ATTN_BWD_DQ_RED,
                    "attention backward: unknown variant " + std::to_string(variant));
    const bool dq_red = variant == ATTN_BWD_DQ_RED;
    detail::require(b > 0 && sq > 0 && skv > 0 && hq > 0 && hkv > 0, "attention: empty shape");
    detail::require(hq % hkv == 0, "attention: Hq must be a multiple of Hkv");
    detail::require(!causal || sq == skv, "attention: causal needs Sq == Skv");
    detail::require(b <= 65535 && hkv <= 65535, "attention: batch or heads too large for the grid");
    if (d == 128)
        attn::run_bwd<128>(dout, q, k, v, out, lse, dlse, delta, lse2, dq_acc, dkv_acc, dq, dk,
                           dv, b, sq, skv, hq, hkv, causal, dq_red, stream);
    else if (d == 64)
        attn::run_bwd<64>(dout, q, k, v, out, lse, dlse, delta, lse2, dq_acc, dkv_acc, dq, dk,
                          dv, b, sq, skv, hq, hkv, causal, dq_red, stream);
    else detail::require(false, "attention: head dim must be 64 or 128");
}

}  // namespace titankit_tk
