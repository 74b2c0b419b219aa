// Attention forward for Hopper (sm_90a) on ThunderKittens tiles: bf16 in/out, fp32 accumulation,
// GQA, causal or full, returning the log-sum-exp. FlashAttention-2 online softmax (Dao 2023) with
// FlashAttention-3's warp specialisation (Shah et al. 2024):
//
//   CTA = one (query head, batch, block of 2 x 64 query rows); 3 warpgroups.
//   - warpgroup 2 (producer, 24 registers): one thread loads the two 64-row Q tiles once, then
//     streams 128-row K and V tiles of the query head's KV head (GQA: h / (Hq / Hkv)) through a
//     STAGES-deep TMA ring; K and V have separate mbarriers so Q K^T starts before V lands.
//   - warpgroups 0, 1 (consumers, 240 registers): each owns 64 query rows. Per K/V tile:
//     S = Q K^T (wgmma, Q from registers, loaded once, and K from shared memory; 64 x 128 fp32 in
//     registers), mask on the diagonal / sequence tail only, online softmax in base 2, O += P V
//     (wgmma, P from registers), software-pipelined so that the softmax of tile i overlaps the
//     P V wgmma of tile i - 1.
//   Out leaves through the Q tile's shared memory and a TMA store; lse goes straight from registers.
//
// Layout (B, S, H, D) is read in place (attention_common.cuh). Causal CTAs are launched heaviest
// first (the query block index runs backwards in the slowest grid dimension) to shorten the tail.
#include "attention_common.cuh"
#include "tk_kernels.h"

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

// One step of the online softmax in base 2 (Milakov & Gimelshein 2018) on one warp's 16 x 128
// scores S, in place, fused into two passes:
//   m = max(m, rowmax(S)), corr = 2^((m_old - m) * sl2) (0 on the first step, m_old = -inf),
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
        ms[r] = mx[r] * sl2;
        cr[r] = exp2f((r == 0 ? m.data[0][0].x : m.data[0][0].y) * sl2 - ms[r]);
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
    typename fwd_cfg<D>::q_gl q, o;
    typename fwd_cfg<D>::kv_gl k, v;
    float* lse;  // (B, Hq, Sq)
    int sq, skv, hq, group;  // group = Hq / Hkv
};

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
    __shared__ semaphore q_full, k_full[STAGES], v_full[STAGES], kv_free[STAGES];

    const int h = blockIdx.x, b = blockIdx.y;
    const int qb = gridDim.z - 1 - blockIdx.z;  // heaviest (causal) blocks first
    const int hkv = h / g.group;
    const int wg = detail::warpgroup_index();
    // K/V tiles this CTA needs: causal stops at its last query row (Sq == Skv).
    const int last_key = CAUSAL ? min(qb * Q_BLOCK + Q_BLOCK, g.sq) - 1 : g.skv - 1;
    const int n_kv = last_key / KV_ROWS + 1;

    if (threadIdx.x == 0) {
        init_semaphore(q_full, 0, 1);
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(k_full[s], 0, 1);
            init_semaphore(v_full[s], 0, 1);
            init_semaphore(kv_free[s], FWD_CONSUMERS * 4, 0);  // one per consumer warp
        }
    }
    __syncthreads();

    if (wg == FWD_CONSUMERS) {  // producer
        warpgroup::decrease_registers<24>();
        if (warpgroup::laneid() == 0) {
            tma::expect_bytes(q_full, FWD_CONSUMERS * sizeof(q_tile));
            for (int c = 0; c < FWD_CONSUMERS; c++)
                load_seq_tile(q_s[c], g.q, b, qb * FWD_CONSUMERS + c, h, q_full);
            for (int i = 0; i < n_kv; i++) {
                const int s = i % STAGES;
                if (i >= STAGES) wait(kv_free[s], ((i / STAGES) - 1) & 1);
                tma::expect_bytes(k_full[s], sizeof(kv_tile));
                load_seq_tile(k_s[s], g.k, b, i, hkv, k_full[s]);
                tma::expect_bytes(v_full[s], sizeof(kv_tile));
                load_seq_tile(v_s[s], g.v, b, i, hkv, v_full[s]);
            }
        }
        return;
    }

    warpgroup::increase_registers<240>();
    const int warp = warpgroup::warpid();
    const int q0 = qb * Q_BLOCK + wg * Q_ROWS;  // first query row of this warpgroup
    const int row0 = q0 + warp * 16;            // first query row of this warp
    const bool active = q0 < g.sq;               // a tile wholly past Sq only keeps the ring moving
    const float sl2 = LOG2E / sqrtf((float)D);   // softmax scale in base 2

    // Intra-warpgroup pipelining (FlashAttention-3, Alg. 2): while the tensor cores compute
    // O += P_{i-1} V_{i-1}, this warpgroup runs the softmax of S_i = Q K_i^T. Causal warpgroups stop
    // at their diagonal block; the blocks after it they only hand back to the producer.
    const int n_mine = !active ? 0 : CAUSAL ? min(n_kv, (q0 + Q_ROWS - 1) / KV_ROWS + 1) : n_kv;
    rt_fl<16, KV_ROWS> att;  // S_i, then P_i in fp32
    rt_bf<16, KV_ROWS> p;    // P_{i-1} in bf16, the A operand of the P V wgmma
    // This warp's 16 query rows, the A operand of every Q K^T: from registers the wgmma reads only
    // K from shared memory (forward 1-2% faster than with Q from shared memory, docs/benchmarks.md 4y).
    rt_bf<16, D> q;
    rt_fl<16, D> o;
    col_t m, l, corr;
    warp::neg_infty(m);
    warp::zero(l);
    warp::zero(o);
    auto softmax = [&](int i) {
        if ((CAUSAL && i * KV_ROWS + KV_ROWS - 1 > q0) || i * KV_ROWS + KV_ROWS > g.skv)
            online_softmax<true, CAUSAL>(att, m, l, corr, sl2, row0, i * KV_ROWS, g.skv);
        else
            online_softmax<false, CAUSAL>(att, m, l, corr, sl2, row0, i * KV_ROWS, g.skv);
    };

    wait(q_full, 0);
    warpgroup::load(q, q_s[wg]);
    if (n_mine > 0) {
        wait(k_full[0], 0);
        detail::wgmma_fence(att);
        warpgroup::mma_ABt<rt_fl<16, KV_ROWS>, rt_bf<16, D>, kv_tile, 0, 0>(att, q, k_s[0]);  // S_0 (64 x 128)
        warpgroup::mma_async_wait();
        softmax(0);  // key 0 is visible to every row: m is finite from here on
        warp::copy(p, att);
        for (int i = 1; i < n_mine; i++) {
            const int s = i % STAGES, sp = (i - 1) % STAGES;
            wait(k_full[s], (i / STAGES) & 1);
            // Pin the last writes of o (the rescale) and p (the conversion) before the wgmma.fence
            // issued with S_i, so that the compiler cannot sink them between the two wgmmas (ptxas
            // would then serialise them); no second fence is needed for P V. No proxy fence either:
            // Q and K arrive by TMA, ordered by their mbarriers (detail::wgmma_fence).
            detail::pin_registers(o);
            detail::pin_registers(p);
            detail::wgmma_fence(att);
            warpgroup::mma_ABt<rt_fl<16, KV_ROWS>, rt_bf<16, D>, kv_tile, 0, 0>(att, q, k_s[s]);  // S_i
            wait(v_full[sp], ((i - 1) / STAGES) & 1);
            // O += P_{i-1} V_{i-1}, relative to m_{i-1}
            warpgroup::mma_AB<rt_fl<16, D>, rt_bf<16, KV_ROWS>, kv_tile, 0, 1>(o, p, v_s[sp]);
            warpgroup::mma_async_wait<1>();  // S_i has landed (wgmma groups retire in order)
            softmax(i);
            warpgroup::mma_async_wait<0>();
            warp::arrive(kv_free[sp]);  // this warp's wgmmas no longer read K_{i-1}, V_{i-1}
            warp::mul_row(o, o, corr);  // O relative to m_i
            warp::copy(p, att);
        }
        const int sl = (n_mine - 1) % STAGES;
        wait(v_full[sl], ((n_mine - 1) / STAGES) & 1);
        warpgroup::mma_AB(o, p, v_s[sl]);
        warpgroup::mma_async_wait();
        warp::arrive(kv_free[sl]);
    }
    for (int i = n_mine; i < n_kv; i++) {  // nothing visible: only keep the ring moving
        wait(k_full[i % STAGES], (i / STAGES) & 1);
        warp::arrive(kv_free[i % STAGES]);
    }
    if (!active) return;

    warp::div_row(o, o, l);
    warpgroup::sync(wg + 1);  // every warp's last Q K^T wgmma has retired: Q is no longer read
    warpgroup::store(q_s[wg], o);  // reuse Q's tile for the output
    detail::fence_async_shared();
    warpgroup::sync(wg + 1);
    if (warpgroup::laneid() == 0) {
        store_seq_tile(g.o, q_s[wg], b, qb * FWD_CONSUMERS + wg, h);
    }

    // lse = m * scale + ln(l), natural log. Lane 4r holds rows r and r + 8 of its warp's 16.
    if (laneid() % 4 == 0) {
        float* lse = g.lse + ((size_t)b * g.hq + h) * g.sq;
        const int r = row0 + laneid() / 4;
        const float2 mv = m.data[0][0], lv = l.data[0][0];
        if (r < g.sq) lse[r] = (mv.x * sl2 + __log2f(lv.x)) * LN2;
        if (r + 8 < g.sq) lse[r + 8] = (mv.y * sl2 + __log2f(lv.y)) * LN2;
    }
    if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
}

template <int D, bool CAUSAL>
void launch_fwd(const fwd_globals<D>& g, int b, cudaStream_t stream) {
    using C = fwd_cfg<D>;
    dim3 grid(g.hq, b, (g.sq + Q_BLOCK - 1) / Q_BLOCK);
    detail::set_smem(fwd_kernel<D, CAUSAL>, C::SMEM);
    fwd_kernel<D, CAUSAL><<<grid, FWD_THREADS, C::SMEM, stream>>>(g);
    detail::check_cuda(cudaGetLastError(), "attention forward launch");
}

template <int D>
void run_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int b, int sq,
             int skv, int hq, int hkv, bool causal, cudaStream_t stream) {
    using C = fwd_cfg<D>;
    fwd_globals<D> g{make_bshd<typename C::q_gl>(q, b, sq, hq, D),
                     make_bshd<typename C::q_gl>(o, b, sq, hq, D),
                     make_bshd<typename C::kv_gl>(k, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(v, b, skv, hkv, D),
                     lse, sq, skv, hq, hq / hkv};
    if (causal) launch_fwd<D, true>(g, b, stream);
    else launch_fwd<D, false>(g, b, stream);
}

}  // namespace attn

void attn_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int b, int sq,
              int skv, int hq, int hkv, int d, bool causal, cudaStream_t stream) {
    detail::require(b > 0 && sq > 0 && skv > 0 && hq > 0 && hkv > 0, "attention: empty shape");
    detail::require(hq % hkv == 0, "attention: Hq must be a multiple of Hkv");
    detail::require(!causal || sq == skv, "attention: causal needs Sq == Skv");
    detail::require(b <= 65535 && (sq + attn::Q_BLOCK - 1) / attn::Q_BLOCK <= 65535,
                    "attention: batch or sequence too large for the grid");
    if (d == 128) attn::run_fwd<128>(q, k, v, o, lse, b, sq, skv, hq, hkv, causal, stream);
    else if (d == 64) attn::run_fwd<64>(q, k, v, o, lse, b, sq, skv, hq, hkv, causal, stream);
    else detail::require(false, "attention: head dim must be 64 or 128");
}

}  // namespace titankit_tk
