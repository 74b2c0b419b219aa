// Attention forward for Hopper (sm_90a) on ThunderKittens tiles: bf16 in/out, fp32 accumulation,
// GQA, causal or full, returning the log-sum-exp. FlashAttention-2 online softmax (Dao 2023) with
// FlashAttention-3's warp specialisation (Shah et al. 2024):
//
//   Work unit ("tile") = one (query head, batch, block of 2 x 64 query rows). Persistent: one CTA
//   per SM walks the tiles heaviest first (causal: the query block index runs backwards) in snake
//   order (of each round of P tiles, CTA c takes number c, of the next number P - 1 - c, ...),
//   which balances the causal tiles' linearly falling work without an atomic counter (a plain
//   stride lost 11% at 512 tiles, docs/benchmarks.md 4n). 3 warpgroups per CTA:
//   - warpgroup 2 (producer, 24 registers): one thread loads each tile's two 64-row Q tiles, then
//     streams 128-row K and V tiles of the query head's KV head (GQA: h / (Hq / Hkv)) through a
//     STAGES-deep TMA ring that runs on across tiles. K and V have their own full and free
//     mbarriers: Q K^T starts before V lands, and a K slot is refilled once its Q K^T retired.
//     The next tile's Q loads as soon as both consumers hold this tile's Q in registers.
//   - warpgroups 0, 1 (consumers, 240 registers): each owns 64 query rows. Per K/V tile:
//     S = Q K^T (wgmma, Q from registers, loaded once, and K from shared memory; 64 x 128 fp32 in
//     registers), mask on the diagonal / sequence tail only, online softmax in base 2, O += P V
//     (wgmma, P from registers), software-pipelined so that the softmax of tile i overlaps the
//     P V wgmma of tile i - 1. The pipeline runs on across work units: a unit's last P V goes out
//     with the next unit's first Q K^T and retires during its first softmax.
//   Out and lse go straight from registers to global memory, so that the Q buffer is free for the
//   next tile without waiting for a store.
//   Against one CTA per tile (the hardware's block scheduler), this forward is 1-2% faster at
//   S 8192 and 3.5% at S 2048 (docs/benchmarks.md 4ze).
//
// Layout (B, S, H, D) is read in place (attention_common.cuh).
#include "attention_common.cuh"
#include "tk_kernels.h"

#include <algorithm>

namespace titankit_tk {
namespace attn {

constexpr int FWD_CONSUMERS = 2;
constexpr int FWD_THREADS = (FWD_CONSUMERS + 1) * 128;
constexpr int Q_ROWS = 64;    // per consumer warpgroup
constexpr int KV_ROWS = 128;  // per K/V tile
constexpr int Q_BLOCK = FWD_CONSUMERS * Q_ROWS;

template <int D>
struct fwd_cfg {
    static constexpr int STAGES = D == 128 ? 3 : 4;
    using q_tile = seq_tile<Q_ROWS, D>;
    using kv_tile = seq_tile<KV_ROWS, D>;
    using q_gl = bshd_gl<q_tile>;
    using kv_gl = bshd_gl<kv_tile>;
    static constexpr int SMEM = FWD_CONSUMERS * sizeof(q_tile) + 2 * STAGES * sizeof(kv_tile) + 1024;
    static_assert(SMEM <= MAX_SHARED_MEMORY - 1024, "forward tiles exceed shared memory");
};

using col_t = rt_fl<16, KV_ROWS>::col_vec;  // one value per query row of a warp's 16

// How far (base 2) a row's running maximum may fall behind its true maximum before the softmax
// moves it: P = 2^(S sl2 - m sl2) stays <= 2^RESCALE_SLACK. While no row of a warp moves its
// maximum, corr is exactly 1 and the warp skips the rescale of O, which otherwise sits between the
// retirement of P V and the next wgmma issue. 0: a maximum moves whenever it grows, so a row's
// largest P is exactly 1 and cuDNN's per-call accuracy is kept. A slack of 8 made the forward
// 2.1-2.6% faster (docs/benchmarks.md 4zi) but rounds a dominant P in (1, 256] to bf16 for P V
// while l holds it unrounded: out 1.2x cuDNN's error at peaked scores, and no forward+backward
// gain that the rounds could tell from noise (4zm).
constexpr float RESCALE_SLACK = 0.f;

// One step of the online softmax in base 2 (Milakov & Gimelshein 2018) on one warp's 16 x 128
// scores S, in place, fused into two passes:
//   m = max(m, rowmax(S)) unless that exceeds m_old by at most RESCALE_SLACK (base 2): then m
//   stays, corr = 2^((m_old - m) * sl2) (1 when m stays, 0 on the first step, m_old = -inf),
//   S <- P = 2^(S * sl2 - m * sl2) (fp32), l = l * corr + rowsum(P).
// MASK hides key > query (CAUSAL) and keys >= kv_len (P = 0): row0 / col0 are this warp's first
// query row and the tile's first key. Lane l holds rows row0 + l/4 (index 0) and + 8 (index 1).
template <bool MASK, bool CAUSAL>
__device__ inline void online_softmax(rt_fl<16, KV_ROWS>& att, col_t& m, col_t& l, col_t& corr,
                                      float sl2, int row0, int col0, int kv_len) {
    auto visible = [&](int k, int j, int dc) {
        const int row = row0 + frag_row(k), col = col0 + j * 16 + frag_col(k) + dc;
        return !MASK || (!(CAUSAL && col > row) && col < kv_len);
    };
    float mx[2] = {m.data[0][0].x, m.data[0][0].y};
#pragma unroll
    for (int j = 0; j < KV_ROWS / 16; j++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            const float2 v = att.tiles[0][j].data[k];
            if (visible(k, j, 0)) mx[k % 2] = fmaxf(mx[k % 2], v.x);
            if (visible(k, j, 1)) mx[k % 2] = fmaxf(mx[k % 2], v.y);
        }
    }
    float ms[2], sum[2] = {0.f, 0.f}, cr[2];
#pragma unroll
    for (int r = 0; r < 2; r++) {  // the four lanes of a quad share a row
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 1));
        mx[r] = fmaxf(mx[r], __shfl_xor_sync(0xffffffffu, mx[r], 2));
        const float mo = r == 0 ? m.data[0][0].x : m.data[0][0].y, mos = mo * sl2;
        ms[r] = mx[r] * sl2;
        if (ms[r] - mos <= RESCALE_SLACK) {  // keep the old maximum: corr = 1, no rescale of O
            mx[r] = mo;
            ms[r] = mos;
        }
        cr[r] = exp2f(mos - ms[r]);
    }
#pragma unroll
    for (int j = 0; j < KV_ROWS / 16; j++) {
#pragma unroll
        for (int k = 0; k < 4; k++) {
            float2& v = att.tiles[0][j].data[k];
            v.x = visible(k, j, 0) ? exp2f(v.x * sl2 - ms[k % 2]) : 0.f;
            v.y = visible(k, j, 1) ? exp2f(v.y * sl2 - ms[k % 2]) : 0.f;
            sum[k % 2] += v.x + v.y;
        }
    }
#pragma unroll
    for (int r = 0; r < 2; r++) {
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 1);
        sum[r] += __shfl_xor_sync(0xffffffffu, sum[r], 2);
    }
    m.data[0][0] = make_float2(mx[0], mx[1]);
    corr.data[0][0] = make_float2(cr[0], cr[1]);
    l.data[0][0] = make_float2(l.data[0][0].x * cr[0] + sum[0], l.data[0][0].y * cr[1] + sum[1]);
}

template <int D>
struct fwd_globals {
    typename fwd_cfg<D>::q_gl q;
    bshd_gl<> o;  // written from registers: no TMA descriptor
    typename fwd_cfg<D>::kv_gl k, v;
    float* lse;  // (B, Hq, Sq)
    int sq, skv, hq, group;  // group = Hq / Hkv
    int batch, n_qblocks;    // tiles = hq * batch * n_qblocks
};

// Tile number t (heaviest first): head fastest, then batch, then the query block from the last down.
struct fwd_tile {
    int h, b, qb;
};
__device__ inline fwd_tile tile_at(int t, int hq, int batch, int n_qblocks) {
    const int hb = hq * batch;
    return {t % hq, (t / hq) % batch, n_qblocks - 1 - t / hb};
}

// The tile a CTA takes in round r: snake order over the P = gridDim.x CTAs. The index grows with r
// for every CTA, so the walk ends at the first index past the last tile.
__device__ inline int snake_tile(int r) {
    const int p = gridDim.x, c = blockIdx.x;
    return r % 2 == 0 ? r * p + c : (r + 1) * p - 1 - c;
}

template <int D, bool CAUSAL>
__global__ __launch_bounds__(FWD_THREADS, 1) void fwd_kernel(const __grid_constant__ fwd_globals<D> g) {
    using C = fwd_cfg<D>;
    using q_tile = typename C::q_tile;
    using kv_tile = typename C::kv_tile;
    constexpr int STAGES = C::STAGES;

    extern __shared__ alignment_dummy smem[];
    detail::smem_allocator al(&smem[0]);
    q_tile(&q_s)[FWD_CONSUMERS] = al.allocate<q_tile, FWD_CONSUMERS>();
    kv_tile(&k_s)[STAGES] = al.allocate<kv_tile, STAGES>();
    kv_tile(&v_s)[STAGES] = al.allocate<kv_tile, STAGES>();
    __shared__ semaphore q_full, q_free, k_full[STAGES], v_full[STAGES], k_free[STAGES], v_free[STAGES];

    const int n_tiles = g.hq * g.batch * g.n_qblocks;
    const int wg = detail::warpgroup_index();
    // K/V tiles a tile needs: causal stops at its last query row (Sq == Skv).
    auto kv_count = [&](int qb) {
        const int last_key = CAUSAL ? min(qb * Q_BLOCK + Q_BLOCK, g.sq) - 1 : g.skv - 1;
        return last_key / KV_ROWS + 1;
    };

    if (threadIdx.x == 0) {
        init_semaphore(q_full, 0, 1);
        init_semaphore(q_free, FWD_CONSUMERS * 4, 0);  // one per consumer warp
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(k_full[s], 0, 1);
            init_semaphore(v_full[s], 0, 1);
            init_semaphore(k_free[s], FWD_CONSUMERS * 4, 0);
            init_semaphore(v_free[s], FWD_CONSUMERS * 4, 0);
        }
    }
    __syncthreads();

    if (wg == FWD_CONSUMERS) {  // producer
        warpgroup::decrease_registers<24>();
        if (warpgroup::laneid() == 0) {
            int it = 0;  // K/V ring position, running on across tiles
            for (int r = 0;; r++) {
                const int t = snake_tile(r);
                if (t >= n_tiles) break;
                const fwd_tile w = tile_at(t, g.hq, g.batch, g.n_qblocks);
                const int hkv = w.h / g.group;
                if (r > 0) wait(q_free, (r - 1) & 1);  // the last tile's Q is in registers
                tma::expect_bytes(q_full, FWD_CONSUMERS * sizeof(q_tile));
                for (int c = 0; c < FWD_CONSUMERS; c++)
                    load_seq_tile(q_s[c], g.q, w.b, w.qb * FWD_CONSUMERS + c, w.h, q_full);
                const int n_kv = kv_count(w.qb);
                for (int i = 0; i < n_kv; i++, it++) {
                    const int s = it % STAGES, round = it / STAGES;
                    if (it >= STAGES) wait(k_free[s], (round - 1) & 1);
                    tma::expect_bytes(k_full[s], sizeof(kv_tile));
                    load_seq_tile(k_s[s], g.k, w.b, i, hkv, k_full[s]);
                    if (it >= STAGES) wait(v_free[s], (round - 1) & 1);
                    tma::expect_bytes(v_full[s], sizeof(kv_tile));
                    load_seq_tile(v_s[s], g.v, w.b, i, hkv, v_full[s]);
                }
            }
        }
        return;
    }

    warpgroup::increase_registers<240>();
    const int warp = warpgroup::warpid();
    const float sl2 = LOG2E / sqrtf((float)D);  // softmax scale in base 2
    rt_fl<16, KV_ROWS> att;  // S_i, then P_i in fp32
    rt_bf<16, KV_ROWS> p;    // P_{i-1} in bf16, the A operand of the P V wgmma
    // This warp's 16 query rows, the A operand of every Q K^T: from registers the wgmma reads only
    // K from shared memory (forward 1-2% faster than with Q from shared memory, docs/benchmarks.md 4y).
    rt_bf<16, D> q;
    rt_fl<16, D> o;
    col_t m, l, corr;
    warp::neg_infty(m);
    warp::zero(l);
    // lse = m * scale + ln(l), natural log, once a tile's last softmax ran. Lane 4r holds rows r and
    // r + 8 of its warp's 16.
    auto store_lse = [&](const fwd_tile& w, int row0) {
        if (laneid() % 4 == 0) {
            float* lse = g.lse + ((size_t)w.b * g.hq + w.h) * g.sq;
            const int row = row0 + laneid() / 4;
            const float2 mv = m.data[0][0], lv = l.data[0][0];
            if (row < g.sq) lse[row] = (mv.x * sl2 + __log2f(lv.x)) * LN2;
            if (row + 8 < g.sq) lse[row + 8] = (mv.y * sl2 + __log2f(lv.y)) * LN2;
        }
    };
    // Across tiles the pipeline runs on: a tile's last P V is issued together with the next tile's
    // S_0 = Q K_0^T and retires while the next tile's first softmax runs; only then is the tile's
    // output divided by l and stored. ppos >= 0 marks such a pending tile (o, p still hold it):
    // its last V's ring position; pl its l, pout its warp's first output row, prows the rows of
    // those 16 that exist. Kept this small for registers (ptxas spilled with more).
    int ppos = -1, prows = 0;
    bf16* pout = nullptr;
    col_t pl;
    // Out as bf16 pairs straight from registers (rows past Sq dropped).
    auto store_out = [&]() {
        warp::div_row(o, o, pl);
        const size_t row_stride = (size_t)g.hq * D;
#pragma unroll
        for (int k = 0; k < 4; k++) {
            if (frag_row(k) < prows) {
                bf16* dst = pout + frag_row(k) * row_stride + frag_col(k);
#pragma unroll
                for (int j = 0; j < D / 16; j++) {
                    const float2 v = o.tiles[0][j].data[k];
                    *reinterpret_cast<bf16_2*>(dst + j * 16) = __floats2bfloat162_rn(v.x, v.y);
                }
            }
        }
    };
    auto finish_pending = [&]() {  // no next S_0 to pair the last P V with
        const int pv = ppos % STAGES;
        wait(v_full[pv], (ppos / STAGES) & 1);
        warpgroup::mma_AB(o, p, v_s[pv]);
        warpgroup::mma_async_wait();
        warp::arrive(v_free[pv]);
        store_out();
        ppos = -1;
    };
    int it = 0;  // K/V ring position, as the producer's
    for (int r = 0;; r++) {
        const int t = snake_tile(r);
        if (t >= n_tiles) break;
        const fwd_tile w = tile_at(t, g.hq, g.batch, g.n_qblocks);
        const int n_kv = kv_count(w.qb);
        const int q0 = w.qb * Q_BLOCK + wg * Q_ROWS;  // first query row of this warpgroup
        const int row0 = q0 + warp * 16;              // first query row of this warp
        const bool active = q0 < g.sq;  // a tile wholly past Sq only keeps the ring moving
        auto ks = [&](int i) { return (it + i) % STAGES; };
        auto phase = [&](int i) { return ((it + i) / STAGES) & 1; };

        // Intra-warpgroup pipelining (FlashAttention-3, Alg. 2): while the tensor cores compute
        // O += P_{i-1} V_{i-1}, this warpgroup runs the softmax of S_i = Q K_i^T. Causal warpgroups
        // stop at their diagonal block; the blocks after it they only hand back to the producer.
        const int n_mine = !active ? 0 : CAUSAL ? min(n_kv, (q0 + Q_ROWS - 1) / KV_ROWS + 1) : n_kv;
        auto softmax = [&](int i) {
            if ((CAUSAL && i * KV_ROWS + KV_ROWS - 1 > q0) || i * KV_ROWS + KV_ROWS > g.skv)
                online_softmax<true, CAUSAL>(att, m, l, corr, sl2, row0, i * KV_ROWS, g.skv);
            else
                online_softmax<false, CAUSAL>(att, m, l, corr, sl2, row0, i * KV_ROWS, g.skv);
        };

        wait(q_full, r & 1);
        if (active) warpgroup::load(q, q_s[wg]);
        __syncwarp();          // every lane's part of the load has returned
        warp::arrive(q_free);  // the producer may load the next tile's Q
        if (n_mine > 0) {
            wait(k_full[ks(0)], phase(0));
            // One branch around both wgmma issues, on a value nvcc can prove warp-uniform (a
            // branch between them, or on a possibly divergent value, makes ptxas serialise them).
            if (__shfl_sync(0xffffffffu, (int)(ppos >= 0), 0)) {
                wait(v_full[ppos % STAGES], (ppos / STAGES) & 1);
                detail::pin_registers(o);
                detail::pin_registers(p);
                detail::wgmma_fence(att);
                warpgroup::mma_ABt<rt_fl<16, KV_ROWS>, rt_bf<16, D>, kv_tile, 0, 0>(att, q, k_s[ks(0)]);  // S_0
                warpgroup::mma_AB<rt_fl<16, D>, rt_bf<16, KV_ROWS>, kv_tile, 0, 1>(o, p, v_s[ppos % STAGES]);
                warpgroup::mma_async_wait<1>();
            } else {
                detail::wgmma_fence(att);
                warpgroup::mma_ABt<rt_fl<16, KV_ROWS>, rt_bf<16, D>, kv_tile, 0, 0>(att, q, k_s[ks(0)]);  // S_0
                warpgroup::mma_async_wait<0>();
            }
            warp::arrive(k_free[ks(0)]);
            warp::neg_infty(m);
            warp::zero(l);
            softmax(0);  // key 0 is visible to every row: m is finite from here on
            warpgroup::mma_async_wait<0>();  // the last tile's P V (outside the branch: ptxas)
            if (ppos >= 0) {
                warp::arrive(v_free[ppos % STAGES]);
                store_out();
            }
            warp::zero(o);
            warp::copy(p, att);
            for (int i = 1; i < n_mine; i++) {
                const int s = ks(i), sp = ks(i - 1);
                wait(k_full[s], phase(i));
                // Pin the last writes of o (the rescale) and p (the conversion) before the
                // wgmma.fence issued with S_i, so that the compiler cannot sink them between the two
                // wgmmas (ptxas would then serialise them); no second fence is needed for P V. No
                // proxy fence either: Q and K arrive by TMA, ordered by their mbarriers.
                detail::pin_registers(o);
                detail::pin_registers(p);
                detail::wgmma_fence(att);
                warpgroup::mma_ABt<rt_fl<16, KV_ROWS>, rt_bf<16, D>, kv_tile, 0, 0>(att, q, k_s[s]);  // S_i
                wait(v_full[sp], phase(i - 1));
                // O += P_{i-1} V_{i-1}, relative to m_{i-1}
                warpgroup::mma_AB<rt_fl<16, D>, rt_bf<16, KV_ROWS>, kv_tile, 0, 1>(o, p, v_s[sp]);
                warpgroup::mma_async_wait<1>();  // S_i has landed (wgmma groups retire in order)
                warp::arrive(k_free[s]);         // this warp's wgmmas no longer read K_i
                softmax(i);
                const float2 cr = corr.data[0][0];
                const bool rescale = __any_sync(0xffffffffu, cr.x != 1.f || cr.y != 1.f);
                warpgroup::mma_async_wait<0>();
                warp::arrive(v_free[sp]);  // nor V_{i-1}
                if (rescale) warp::mul_row(o, o, corr);  // O relative to m_i
                warp::copy(p, att);
            }
            store_lse(w, row0);  // m, l are final; the last P V changes only o
            ppos = it + n_mine - 1;
            pl = l;
            pout = g.o.raw_ptr + (((size_t)w.b * g.sq + row0) * g.hq + w.h) * D;
            prows = g.sq - row0;
        }
        // Before the ring waits below: the producer may need the pending tile's V slot back.
        if (n_mine < n_kv && ppos >= 0) finish_pending();
        for (int i = n_mine; i < n_kv; i++) {  // nothing visible: only keep the ring moving
            wait(k_full[ks(i)], phase(i));
            warp::arrive(k_free[ks(i)]);
            wait(v_full[ks(i)], phase(i));
            warp::arrive(v_free[ks(i)]);
        }
        it += n_kv;
    }
    if (ppos >= 0) finish_pending();
}

template <int D, bool CAUSAL>
void launch_fwd(const fwd_globals<D>& g, cudaStream_t stream) {
    using C = fwd_cfg<D>;
    const long tiles = (long)g.hq * g.batch * g.n_qblocks;  // one CTA per SM (shared memory)
    const int grid = (int)std::min<long>(tiles, detail::num_sms());
    detail::set_smem(fwd_kernel<D, CAUSAL>, C::SMEM);
    fwd_kernel<D, CAUSAL><<<grid, FWD_THREADS, C::SMEM, stream>>>(g);
    detail::check_cuda(cudaGetLastError(), "attention forward launch");
}

template <int D>
void run_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int b, int sq,
             int skv, int hq, int hkv, bool causal, cudaStream_t stream) {
    using C = fwd_cfg<D>;
    fwd_globals<D> g{make_bshd<typename C::q_gl>(q, b, sq, hq, D),
                     make_bshd<bshd_gl<>>(o, b, sq, hq, D),
                     make_bshd<typename C::kv_gl>(k, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(v, b, skv, hkv, D),
                     lse, sq, skv, hq, hq / hkv, b, (sq + Q_BLOCK - 1) / Q_BLOCK};
    if (causal) launch_fwd<D, true>(g, stream);
    else launch_fwd<D, false>(g, stream);
}

}  // namespace attn

void attn_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int b, int sq,
              int skv, int hq, int hkv, int d, bool causal, cudaStream_t stream) {
    detail::require(b > 0 && sq > 0 && skv > 0 && hq > 0 && hkv > 0, "attention: empty shape");
    detail::require(hq % hkv == 0, "attention: Hq must be a multiple of Hkv");
    detail::require(!causal || sq == skv, "attention: causal needs Sq == Skv");
    detail::require((long)hq * b * ((sq + attn::Q_BLOCK - 1) / attn::Q_BLOCK) < (1L << 30),
                    "attention: Hq x B x ceil(Sq / 128) query tiles must stay below 2^30 (int indices)");
    if (d == 128) attn::run_fwd<128>(q, k, v, o, lse, b, sq, skv, hq, hkv, causal, stream);
    else if (d == 64) attn::run_fwd<64>(q, k, v, o, lse, b, sq, skv, hq, hkv, causal, stream);
    else detail::require(false, "attention: head dim must be 64 or 128");
}

}  // namespace titankit_tk
