// Attention backward for Hopper (sm_90a) on ThunderKittens tiles: the FlashAttention-2 backward
// (Dao 2023, Alg. 2) with FlashAttention-3's structure (Shah et al. 2024), bf16 gradients.
//
// Kernels, all on `stream`, no host synchronisation:
//   1. prep: delta = rowsum(dO * O) (- dlse, the gradient flowing into lse, when given: it adds
//      dlse * P to dS) and lse2 = lse * log2(e) into (B, Hq, Sp) buffers (Sp = Sq
//      rounded up to 64; padded rows get delta 0, lse2 +inf, so their P is exactly 0); a memset
//      zeroes the fp32 dQ accumulator (deterministic mode: not needed, see lock_count).
//   2. main: CTA = one (KV head, batch) and a block of 128 keys, or two blocks one after the other
//      (causal: see bwd_unit); 3 warpgroups. For each key block the producer loads K, V once, then
//      streams (Q, dO, lse2, delta) tiles of 64 queries for every query head of the GQA group and
//      every query tile the keys can see (causal: from the diagonal on) through a 2-stage TMA
//      ring. Each consumer owns 64 keys and accumulates dK, dV (64 x D fp32) over the whole
//      group in registers:
//         S^T = K Q^T, dP^T = V dO^T                      (wgmma from shared memory)
//         P^T = exp2(S^T * scale * log2e - lse2), dS^T = P^T * (dP^T - delta)
//         dV += P^T dO, dK += dS^T Q                       (wgmma, P^T / dS^T from registers)
//      dS^T goes to shared memory (double buffered, handed over with mbarriers). dQ needs both
//      consumers' dS^T, so each consumer computes half of dQ's columns one iteration later,
//      dQ[:, half] = dS K[:, half] (D = 64: consumer 0 does all), issuing those wgmmas before the
//      iteration's dV / dK ones: once they retired, it adds dQ into the fp32 accumulator in its
//      register order with eight 16-byte vector reductions per thread (red.global.add.v4.f32)
//      while dV / dK still run (see dq_block for the layout).
//      dK (times the softmax scale) and dV leave as bf16 through TMA stores.
//   3. dq = bf16(dq_acc * scale), putting the blocks' rows and columns back in place.
// dQ's accumulator is not bitwise deterministic by default (the order of the reductions varies).
// Deterministic mode (a `locks` workspace, torch.use_deterministic_algorithms) makes every fp32
// accumulator block take its adds in key-block order: see lock_count below.
//
// Why this schedule (docs/benchmarks.md sections 4a and 4b): dQ is a fifth of the FLOPs, but when
// each consumer waited for all its wgmmas before staging dQ (a swizzled fp32 tile: 32 scalar
// stores and their address arithmetic per thread) and only then started the next S^T / dP^T, dQ
// took a third of the time. The register-order block (eight 16-byte adds) and the dQ-first
// order overlap the adds with dV / dK within the 240 registers; orders that also overlap the
// next S^T / dP^T need their 64 accumulator registers beside dK, dV, P^T and dS^T and spill, and
// dV issued between S^T's and dP^T's waits measured slower; so did cuDNN's schedule pieces
// (consumers taking turns at a whole m64n128 dQ, with or without lockstep barriers; dP^T issued
// after S^T into its registers beside the exponentials; section 4c). (A wgmma's asm reads its
// accumulator, "+f", so a tile declared outside a loop stays live unless zeroed before its wgmma.)
#include "attention_common.cuh"
#include "tk_kernels.h"

#include <algorithm>
#include <cmath>
#include <type_traits>

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
__host__ __device__ inline int key_blocks(int skv) {
    return (skv + BWD_KV_BLOCK - 1) / BWD_KV_BLOCK;
}

template <int D>
struct bwd_cfg {
    static constexpr bool SPLIT_DQ = D == 128;  // each consumer computes 64 of dQ's 128 columns
    static constexpr int DQ_COLS = SPLIT_DQ ? D / 2 : D;
    static constexpr int DQ_PARTS = D / DQ_COLS;
    static constexpr int DQ_BLOCK = BWD_Q * DQ_COLS;  // floats of one dQ block (16 KiB)
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
                                + BWD_CONSUMERS * sizeof(dq_tile)       // dQ (det. mode), dK/dV staging
                                + 2 * 1024                              // lse2, delta (aligned)
                                + 1024;  // the allocator's 1024-byte alignment of the start
    static_assert(SMEM <= MAX_SHARED_MEMORY - 1024, "backward tiles exceed shared memory");
    static_assert(BWD_STAGES * sizeof(vec) <= 1024, "lse2 / delta stages exceed their allocation");
};

template <int D>
struct bwd_globals {
    typename bwd_cfg<D>::q_gl q, dout;
    typename bwd_cfg<D>::kv_gl k, v, dk, dv;
    typename bwd_cfg<D>::dq_gl dk_acc, dv_acc;  // split > 1 only
    typename bwd_cfg<D>::vec_gl lse2, delta;
    float* dq_acc;  // fragment-ordered blocks, see dq_block
    int* locks;     // deterministic mode: add counters, see lock_count
    int sq, skv, hq, group, split;  // split: CTAs sharing one (KV head, key block), see kv_split
};

// Deterministic mode. fp32 addition is not associative, so each dQ accumulator block must take its
// partials in a fixed order: key block 0 first, then 1, 2, ... Every block has an int counter of
// the adds done so far; a CTA waits until the counter reaches its own rank among the block's adders
// (its key block: every lower key block adds to a query tile the CTA's keys see, causal or not),
// adds, and once the add completed, increments the counter. Key block 0, every block's first adder,
// stores instead of adding, so the accumulator needs no zeroing pass. No deadlock: a CTA takes its
// block index from a ticket counter when it starts (the grid's order, key blocks outermost), not
// from blockIdx, so every predecessor took its ticket earlier and holds an SM or has finished,
// whatever order the hardware dispatches CTAs in or whatever else runs beside (with blockIdx, an
// SM-filling set of waiting CTAs could wait for one not yet dispatched). The CTAs visit query tiles
// from the last one down with the heads inside, so the key blocks of a KV head pass the same dQ
// blocks one step apart instead of waiting on each other's whole head loops. The dQ adds are made
// by two otherwise idle producer warps (one per consumer), so the consumers wait neither for turns
// nor for adds to complete: with the consumers waiting themselves, the backward was 23% slower than
// the default instead of 9% (docs/benchmarks.md 4f). The dK / dV partials of split CTAs need no
// turns: each split part stores its own fp32 slice, and the conversion kernel sums the slices in
// order. Ints: the ticket counter, then B * Hq * n_qt * 2 add counters.
inline long lock_count(int b, int sq, int hq) {
    return 1 + (long)b * hq * (padded_len(sq) / BWD_Q) * 2;
}

__device__ inline void wait_turn(const int* lock, int turn) {
    int done;
    for (;;) {
        asm volatile("ld.acquire.gpu.global.s32 %0, [%1];\n" : "=r"(done) : "l"(lock) : "memory");
        if (done >= turn) break;
        __nanosleep(32);
    }
    // This thread's next bulk add (async proxy) after what the acquire made visible.
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
}

// After cp.async.bulk.wait_group 0: the adds completed; pass the turn on.
__device__ inline void pass_turn(int* lock) {
    asm volatile("fence.proxy.async.global;\n" ::: "memory");
    asm volatile("red.release.gpu.global.add.s32 [%0], 1;\n" ::"l"(lock) : "memory");
}

// How many CTAs share the query heads of one (KV head, key block). One CTA per pair leaves SMs idle
// when there are few KV heads (Llama-3 70B under TP 8 has one: 64 CTAs at S = 8192 on 132 SMs);
// then each CTA takes G / split of the group's query heads and adds its fp32 dK / dV partials
// into accumulators with TMA reduce-adds. split divides G and stops at two CTAs per SM.
inline int kv_split(int b, int hq, int hkv, int skv, int sms) {
    const int g = hq / hkv;
    const long ctas = (long)b * hkv * key_blocks(skv);
    int split = 1;
    while (ctas * split < 2L * sms && split < g) {
        split++;
        while (g % split) split++;
    }
    return split;
}

// The work of a CTA: one or two units, each a key block of its KV head with every query tile the
// block sees. Causal attention (default mode, split 1) pairs key blocks p and n_kvb - 1 - p in the
// CTA at grid z = p, so every CTA has the same number of iterations (n_qt + 2 query tiles per head
// when n_qt = 2 n_kvb) and the CTAs of a wave stay in step. The first unit walks its query tiles
// from the last one down, the second from its diagonal up, the heads inside: at step t of the walk
// every first unit is at query tile n_qt - 1 - t and every second unit at t - 2 (n_qt = 2 n_kvb),
// whatever p. So the CTAs that add into a dQ block and read its Q and dO tiles do so within a few
// iterations of each other, mostly hitting in L2. With one key block per CTA (heads outside, query
// tiles from the diagonal up) CTAs of different lengths drifted apart: at the anchor shape 10 GB of
// DRAM traffic instead of 2, 62% L2 hits instead of 91%, the main kernel 4.81 ms instead of 4.45,
// and at the 700 W power limit forward+backward 490 TFLOP/s instead of 530 (docs/benchmarks.md 4i).
// Each paired CTA starts at its own head (rot), spreading the reduce-adds of the CTAs at one query
// tile over the group's dQ blocks. Full attention (its CTAs all have the same length already) and
// split > 1 keep one key block per CTA, heads outside: pairing them showed no gain beyond the
// spread of repeated runs. Deterministic mode: one key block per CTA, from the last query tile
// down, heads inside, rot 0 (lock_count).
struct bwd_unit {
    int kvb, qt_first, per_head, rot;
    bool desc;         // query tiles from the last one down
    bool heads_inner;  // else each head's query tiles (from the diagonal up) before the next head

    __device__ int iters(int heads) const { return heads * per_head; }

    // (query head, query tile) of the unit's iteration j, heads h0 .. h0 + heads - 1.
    __device__ int2 tile(int j, int h0, int heads, int n_qt) const {
        if (!heads_inner) return {h0 + j / per_head, qt_first + j % per_head};
        const int step = j / heads;
        const int hh = j - step * heads + rot;  // < 2 heads
        return {h0 + (hh < heads ? hh : hh - heads), desc ? n_qt - 1 - step : qt_first + step};
    }
};

// A unit's tiles in iteration order, tile(j) for j = 0, 1, ... by additions. tile()'s integer
// divisions (a reciprocal, conversions and fix-ups: about 30 instructions each, two per consumer
// iteration) sat in the stretch between one iteration's last wgmma and the next one's first. Alone
// this measured level; with the loop's descriptors built once (below) the two gave forward+backward
// +2.3% at the ANCHORS shape, where the descriptors alone were 1% slower (docs/benchmarks.md 4zc).
struct tile_walker {
    int2 at;    // (query head, query tile) of the current iteration
    int k;      // heads_inner: heads done in this step; else tiles done of this head
    int h_end;  // heads_inner: one past the last head of the CTA
    int h_rot;  // heads_inner: the first head of every step
    bwd_unit un;
    int h0, heads;

    __device__ tile_walker(const bwd_unit& u, int h0_, int heads_, int n_qt)
        : at(u.tile(0, h0_, heads_, n_qt)), k(0), h_end(h0_ + heads_), h_rot(at.x), un(u), h0(h0_),
          heads(heads_) {}

    __device__ void next() {
        if (!un.heads_inner) {
            if (++k == un.per_head) {
                k = 0;
                at = {at.x + 1, un.qt_first};
            } else {
                at.y++;
            }
        } else if (++k == heads) {
            k = 0;
            at = {h_rot, at.y + (un.desc ? -1 : 1)};
        } else {
            at.x = at.x + 1 == h_end ? h0 : at.x + 1;
        }
    }
};

__host__ __device__ inline bool bwd_paired(bool causal, bool det, int split) {
    return causal && !det && split == 1;
}

// (x, y, z) of the CTA with launch index blockIdx.x + gridDim.x (blockIdx.y + gridDim.y blockIdx.z)
// when z runs fastest.
__device__ inline int3 pairs_fastest() {
    const int lin = blockIdx.x + gridDim.x * (blockIdx.y + gridDim.y * blockIdx.z);
    const int r = lin / gridDim.z;
    return make_int3(r % gridDim.x, r / gridDim.x, lin % gridDim.z);
}

// Grid z: key blocks, or pairs of them.
inline int bwd_grid_z(int skv, bool paired) {
    const int n_kvb = key_blocks(skv);
    return paired ? (n_kvb + 1) / 2 : n_kvb;
}

// Unit u of the CTA at grid z.
template <bool CAUSAL, bool DET>
__device__ inline bwd_unit make_unit(int z, int u, bool paired, int skv, int n_qt, int heads) {
    const int n_kvb = key_blocks(skv);
    const int kvb = u == 0 ? z : n_kvb - 1 - z;
    const int qt_first = CAUSAL ? kvb * BWD_KV_BLOCK / BWD_Q : 0;  // Sq == Skv when causal
    return {kvb, qt_first, n_qt - qt_first, paired ? z % heads : 0, DET || u == 0, DET || paired};
}

// ---------------------------------------------------------------------------------------------
// 1. delta and lse2. One row (b, s, h) per 8 threads, D / 8 elements each.
template <int D>
__global__ void prep_kernel(const bf16* __restrict__ dout, const bf16* __restrict__ out,
                            const float* __restrict__ lse, const float* __restrict__ dlse,
                            float* __restrict__ delta, float* __restrict__ lse2, int b, int sq,
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

// The fp32 dQ accumulator is a sequence of blocks, one per (b, h, query tile, column part):
// block ((b * Hq + h) * n_qt + qt) * DQ_PARTS + part holds the 64 x DQ_COLS partial in the order
// the consumer warpgroup's registers hold it: float4 m of thread t (0..127) at m * 128 + t. So a
// consumer adds its partial with eight 16-byte vector reductions per thread, each warp's 512
// contiguous bytes (deterministic mode: eight conflict-free 16-byte staging stores, then one
// contiguous bulk add; an st_fl tile took 32 scalar swizzled stores and their address
// arithmetic); the conversion kernel puts rows and columns back in place (dq_block_coords).
template <int D>
__device__ inline size_t dq_block(int b, int h, int qt, int part, int hq, int n_qt) {
    return ((((size_t)b * hq + h) * n_qt + qt) * bwd_cfg<D>::DQ_PARTS + part) *
           bwd_cfg<D>::DQ_BLOCK;
}

// Float4 m of this thread's 16 x DQ_COLS fp32 fragment: pairs data[2 (m % 2)] and
// data[2 (m % 2) + 1] of 16 x 16 subtile m / 2, i.e. rows r and r + 8, columns c, c + 1.
template <typename RT>
__device__ inline float4 dq_float4(const RT& dq, int m) {
    const float2 lo = dq.tiles[0][m / 2].data[2 * (m % 2)];
    const float2 hi = dq.tiles[0][m / 2].data[2 * (m % 2) + 1];
    return make_float4(lo.x, lo.y, hi.x, hi.y);
}

// Row and first column inside a dQ block of float4 m of consumer thread t: elements 0, 1 sit at
// (row, col), (row, col + 1), elements 2, 3 at (row + 8, col), (row + 8, col + 1).
__device__ inline int2 dq_block_coords(int m, int t) {
    const int lane = t % 32;
    return {(t / 32) * 16 + lane / 4, (m / 2) * 16 + (m % 2) * 8 + 2 * (lane % 4)};
}

// Writes one staged dQ block (shared address `stage`) into `acc` as its own bulk async-group: a
// bulk reduce-add, or with ADD false a plain bulk store (deterministic mode's first adder of every
// block, key block 0, so the accumulator needs no zeroing).
template <int D, bool ADD = true>
__device__ inline void bulk_add(float* acc, uint32_t stage) {
    if constexpr (ADD) {
        asm volatile("cp.reduce.async.bulk.global.shared::cta.bulk_group.add.f32 [%0], [%1], %2;\n"
                     ::"l"(acc), "r"(stage), "n"(bwd_cfg<D>::DQ_BLOCK * 4) : "memory");
    } else {
        asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;\n"
                     ::"l"(acc), "r"(stage), "n"(bwd_cfg<D>::DQ_BLOCK * 4) : "memory");
    }
    asm volatile("cp.async.bulk.commit_group;\n" ::: "memory");
}

template <int D, bool CAUSAL, bool DET>
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
    __shared__ semaphore kv_full, kv_free, qo_full[BWD_STAGES], qo_free[BWD_STAGES];
    __shared__ semaphore ds_full[2], ds_free[2];
    __shared__ semaphore dq_staged[BWD_CONSUMERS], dq_read[BWD_CONSUMERS];  // deterministic mode
    __shared__ int ticket;  // deterministic mode: this CTA's place in start order (lock_count)

    if (threadIdx.x == 0) {
        if constexpr (DET) ticket = atomicAdd(g.locks, 1);
        init_semaphore(kv_full, 0, 1);
        init_semaphore(kv_free, BWD_CONSUMERS, 0);  // one arrival per consumer warpgroup
        for (int s = 0; s < BWD_STAGES; s++) {
            init_semaphore(qo_full[s], 0, 1);
            init_semaphore(qo_free[s], BWD_CONSUMERS * 4, 0);  // one per consumer warp
        }
        for (int s = 0; s < 2; s++) {
            init_semaphore(ds_full[s], BWD_CONSUMERS * 4, 0);
            init_semaphore(ds_free[s], BWD_CONSUMERS * 4, 0);
        }
        for (int c = 0; DET && c < BWD_CONSUMERS; c++) {  // the writer warps' hand-over
            init_semaphore(dq_staged[c], 4, 0);  // one per consumer warp
            init_semaphore(dq_read[c], 1, 0);
        }
    }
    __syncthreads();

    // The grid is (Hkv * split, B, key blocks or pairs of them, see bwd_unit); deterministic mode
    // walks it in ticket order. Paired CTAs take the pairs fastest in launch order, so the CTAs
    // running at once cover every pair of a few (KV head, batch) and read each Q / dO tile and
    // add into each dQ block together (bwd_unit), instead of a few pairs of every KV head.
    const bool paired = bwd_paired(CAUSAL, DET, g.split);
    const int3 cta = DET ? make_int3(ticket % gridDim.x, ticket / gridDim.x % gridDim.y,
                                     ticket / (gridDim.x * gridDim.y))
                   : paired ? pairs_fastest()
                            : make_int3(blockIdx.x, blockIdx.y, blockIdx.z);
    const int hkv = cta.x / g.split, b = cta.y;
    const int heads = g.group / g.split;  // query heads of this CTA
    const int h0 = hkv * g.group + (cta.x % g.split) * heads;
    const int wg = detail::warpgroup_index();
    const int n_qt = (g.sq + BWD_Q - 1) / BWD_Q;
    const int n_kvb = key_blocks(g.skv);
    const int n_units = paired && n_kvb - 1 - cta.z > cta.z ? 2 : 1;
    auto unit = [&](int u) { return make_unit<CAUSAL, DET>(cta.z, u, paired, g.skv, n_qt, heads); };

    if (wg == BWD_CONSUMERS) {  // producer
        warpgroup::decrease_registers<24>();
        if (warpgroup::laneid() == 0) {
            for (int u = 0, base = 0; u < n_units; u++) {  // base: the ring's iteration count
                const bwd_unit un = unit(u);
                if (u > 0) wait(kv_free, (u - 1) & 1);  // both consumers stored dK, dV
                tma::expect_bytes(kv_full, 2 * BWD_CONSUMERS * sizeof(kv_tile));
                for (int c = 0; c < BWD_CONSUMERS; c++) {
                    load_seq_tile(k_s[c], g.k, b, un.kvb * BWD_CONSUMERS + c, hkv, kv_full);
                    load_seq_tile(v_s[c], g.v, b, un.kvb * BWD_CONSUMERS + c, hkv, kv_full);
                }
                tile_walker w(un, h0, heads, n_qt);
                for (int j = 0; j < un.iters(heads); j++, w.next()) {
                    const int it = base + j, s = it % BWD_STAGES;
                    const auto [h, qt] = w.at;
                    if (it >= BWD_STAGES) wait(qo_free[s], ((it / BWD_STAGES) - 1) & 1);
                    tma::expect_bytes(qo_full[s], 2 * sizeof(q_tile) + 2 * sizeof(vec));
                    load_seq_tile(q_s[s], g.q, b, qt, h, qo_full[s]);
                    load_seq_tile(do_s[s], g.dout, b, qt, h, qo_full[s]);
                    tma::load_async(lse_s[s], g.lse2, {b, h, qt}, qo_full[s]);
                    tma::load_async(delta_s[s], g.delta, {b, h, qt}, qo_full[s]);
                }
                base += un.iters(heads);
            }
        }
        // Deterministic mode: producer warp 1 + c adds consumer c's staged dQ blocks in turn, so
        // the consumers never wait for a turn or for an add to complete themselves; they only
        // wait for the staging block to be read before refilling it, one iteration later.
        const int c = warpgroup::warpid() - 1;
        if (DET && c >= 0 && c < BWD_CONSUMERS && (C::SPLIT_DQ || c == 0) && laneid() == 0) {
            const uint32_t stage = static_cast<uint32_t>(__cvta_generic_to_shared(&dq_s[c]));
            const bwd_unit un = unit(0);  // deterministic mode: one unit per CTA
            const int kvb = un.kvb;
            tile_walker w(un, h0, heads, n_qt);
            for (int it = 0; it < un.iters(heads); it++, w.next()) {
                const auto [h, qt] = w.at;
                const size_t blk = dq_block<D>(b, h, qt, C::SPLIT_DQ ? c : 0, g.hq, n_qt);
                int* const lock = g.locks + 1 + blk / C::DQ_BLOCK;
                wait(dq_staged[c], it & 1);
                wait_turn(lock, kvb);
                if (kvb == 0) bulk_add<D, false>(g.dq_acc + blk, stage);
                else bulk_add<D>(g.dq_acc + blk, stage);
                tma::store_async_read_wait<0>();
                arrive(dq_read[c]);
                tma::store_async_wait<0>();
                pass_turn(lock);
            }
        }
        return;
    }

    warpgroup::increase_registers<240>();
    const float scale = rsqrtf((float)D), sl2 = scale * LOG2E;

    // dQ of iteration `it` needs both consumers' halves of dS^T. It is issued one iteration later,
    // so the consumers hand dS^T over through mbarriers (ds_full / ds_free, double buffered) and
    // never wait in lockstep for each other's softmax.
    const int part = C::SPLIT_DQ ? wg : 0;          // dQ column part of this consumer
    const bool has_dq = C::SPLIT_DQ || wg == 0;     // D = 64: consumer 1 computes no dQ
    using dq_rt = rt_fl<16, C::DQ_COLS>;
    // dQ[:, cols] of iteration `it` = dS K[:, cols] = sum over the two key halves of
    // (dS^T half)^T K half: it needs both consumers' dS^T of that iteration.
    auto dq_mma = [&](int it, dq_rt& dq) {
        const int buf = it % 2;
        // References: copies of the two 8 KB subtiles would live in local memory, and the wgmmas
        // would then read generic addresses (an illegal access).
        auto& k0 = k_s[0].template subtile<C::DQ_COLS>(part);
        auto& k1 = k_s[1].template subtile<C::DQ_COLS>(part);
        using k_sub = std::remove_reference_t<decltype(k0)>;
        detail::wgmma_fence(dq);
        warpgroup::mma_AtB<dq_rt, ds_tile, k_sub, 0, 0>(dq, ds_s[buf][0], k0);
        warpgroup::mma_AtB<dq_rt, ds_tile, k_sub, 0, 1>(dq, ds_s[buf][1], k1);
    };
    // Once dq's wgmmas retired: free the dS^T buffer and add dq into its accumulator block with
    // eight 16-byte vector reductions per thread, straight from registers (staging it for one bulk
    // reduce-add kept the consumers in a proxy fence and two barriers: forward+backward level to
    // 1.1% slower, docs/benchmarks.md 4u). Deterministic mode stages dq for this consumer's writer
    // warp, which adds in key-block order.
    auto dq_add = [&](int it, int2 tile, const dq_rt& dq) {
        const auto [h, qt] = tile;
        const int t = warpgroup::laneid();  // 0..127
        warp::arrive(ds_free[it % 2]);
        if constexpr (!DET) {
            float* const blk = g.dq_acc + dq_block<D>(b, h, qt, part, g.hq, n_qt) + 4 * t;
#pragma unroll
            for (int m = 0; m < C::DQ_BLOCK / 512; m++) {
                const float4 v = dq_float4(dq, m);
                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"l"(blk + 512 * m),
                             "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                             : "memory");
            }
        } else {
            const uint32_t stage = static_cast<uint32_t>(__cvta_generic_to_shared(&dq_s[wg]));
            if (it > 0) wait(dq_read[wg], (it - 1) & 1);  // staging block free
#pragma unroll
            for (int m = 0; m < C::DQ_BLOCK / 512; m++) {
                const float4 v = dq_float4(dq, m);
                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\n" ::"r"(
                                 stage + 16 * (m * 128 + t)),
                             "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
                             : "memory");
            }
            detail::fence_async_shared();
            __syncwarp();  // the whole warp's stores and fences before lane 0's (release) arrival
            warp::arrive(dq_staged[wg]);
        }
    };
    // The dQ step of iteration `it`: its wgmmas go first, then `after` issues this consumer's
    // remaining wgmmas (PENDING groups: dV, dK of the next iteration, or none after the loop); once
    // dQ's retired, dQ is added (deterministic mode: staged) while those run.
    auto dq_step = [&](int it, int2 tile, auto&& after, auto pending) {
        wait(ds_full[it % 2], (it / 2) & 1);
        if (has_dq) {
            dq_rt dq;
            dq_mma(it, dq);
            after();
            warpgroup::mma_async_wait<decltype(pending)::value>();
            dq_add(it, tile, dq);
        } else {
            warp::arrive(ds_free[it % 2]);
            after();
        }
    };

    // The wgmma descriptors of the loop's shared tiles, built once. TK builds a descriptor from the
    // tile's address at every call, and nvcc recomputed those addresses (the allocator's alignment
    // chain, about 50 dependent uniform-datapath instructions) between each stage's wait and its
    // first wgmma. A clock() trace put a quarter of the iteration in stretches with neither
    // consumer's wgmmas in flight, most of them while one consumer was between its last wgmma of
    // an iteration and its first of the next (docs/benchmarks.md 4zc).
    static_assert(BWD_STAGES == 2, "one descriptor per stage below");
    using kdesc = st_descriptor<kv_tile, 0>;    // K-major operands: S^T = K Q^T, dP^T = V dO^T
    using qdesc = st_descriptor<q_tile, 0>;
    using qdesc_t = st_descriptor<q_tile, 1>;   // MN-major: dV += P^T dO, dK += dS^T Q
    // (An empty asm makes each value opaque, so nvcc keeps it instead of rebuilding it in the loop.)
    auto keep = [](auto d) {
        asm volatile("" : "+l"(d.base_desc));
        return d;
    };
    const kdesc k_d = keep(kdesc(k_s[wg])), v_d = keep(kdesc(v_s[wg]));
    const qdesc q_d0 = keep(qdesc(q_s[0])), q_d1 = keep(qdesc(q_s[1]));
    const qdesc do_d0 = keep(qdesc(do_s[0])), do_d1 = keep(qdesc(do_s[1]));
    const qdesc_t q_t0 = keep(qdesc_t(q_s[0])), q_t1 = keep(qdesc_t(q_s[1]));
    const qdesc_t do_t0 = keep(qdesc_t(do_s[0])), do_t1 = keep(qdesc_t(do_s[1]));
    // The same for the lse2 / delta stages' addresses (the allocator's last tiles: the longest
    // chain). Deterministic mode keeps TK's addressing: these four pointers spill there (8 bytes).
    auto keep_ptr = [](vec* v) {
        asm volatile("" : "+l"(v));
        return v;
    };
    vec* const lse_p0 = keep_ptr(&lse_s[0]);
    vec* const lse_p1 = keep_ptr(&lse_s[1]);
    vec* const delta_p0 = keep_ptr(&delta_s[0]);
    vec* const delta_p1 = keep_ptr(&delta_s[1]);

    rt_fl<16, D> dk, dv;
    for (int u = 0, base = 0; u < n_units; u++) {  // base: the ring's iteration count
        const bwd_unit un = unit(u);
        const int kv0 = un.kvb * BWD_KV_BLOCK + wg * BWD_KV;  // first key of this consumer
        const int krow0 = kv0 + warpgroup::warpid() * 16;     // first key of this warp
        const bool kv_tail = kv0 + BWD_KV > g.skv;
        warp::zero(dk);
        warp::zero(dv);
        wait(kv_full, u & 1);

        tile_walker w(un, h0, heads, n_qt);
        int2 prev = w.at;  // the tile of iteration ui - 1
        for (int ui = 0; ui < un.iters(heads); ui++, prev = w.at, w.next()) {
            const int it = base + ui, s = it % BWD_STAGES, buf = it % 2;
            const int q0 = w.at.y * BWD_Q;
            wait(qo_full[s], (it / BWD_STAGES) & 1);

            // lse2 and delta (per query, column) read before S^T / dP^T are issued: those two
            // wgmmas read both operands from shared memory at the pipe's full rate (4zd), and the
            // loads issued after them competed for that pipe (an inference, not profiled).
            // Forward+backward 2.6-3.5% faster than loads after the issue; loads after the
            // wgmmas retired were 0.2-2.6% slower (docs/benchmarks.md 4zq).
            typename rt_fl<16, BWD_Q>::row_vec lse2, delta;
            load_cols(lse2, DET ? lse_s[s] : *(s ? lse_p1 : lse_p0));
            load_cols(delta, DET ? delta_s[s] : *(s ? delta_p1 : delta_p0));
            rt_fl<16, BWD_Q> st, dpt;  // S^T and dP^T: this warp's 16 keys x 64 queries
            detail::wgmma_fence(st);
            detail::wgmma_fence(dpt);
            warpgroup::mma_ABt<rt_fl<16, BWD_Q>, kdesc, qdesc, 0, 0>(st, k_d, s ? q_d1 : q_d0);
            warpgroup::mma_ABt<rt_fl<16, BWD_Q>, kdesc, qdesc, 0, 0>(dpt, v_d, s ? do_d1 : do_d0);
            warpgroup::mma_async_wait();

            // P^T = exp2(S^T * scale * log2e - lse2): padded queries have lse2 = +inf -> 0.
#pragma unroll
            for (int j = 0; j < BWD_Q / 16; j++) {  // one FFMA per element (mul + sub_col took two)
#pragma unroll
                for (int k = 0; k < 4; k++) {
                    float2& v = st.tiles[0][j].data[k];
                    const float2 l = lse2.data[j][k / 2];
                    v.x = fmaf(v.x, sl2, -l.x);
                    v.y = fmaf(v.y, sl2, -l.y);
                }
            }
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
            auto dv_dk = [&] {
                detail::wgmma_fence(dv);
                detail::wgmma_fence(dk);
                using acc = rt_fl<16, D>;
                using pt = rt_bf<16, BWD_Q>;
                warpgroup::mma_AB<acc, pt, qdesc_t, 0, 1>(dv, p_bf, s ? do_t1 : do_t0);  // dV += P^T dO
                warpgroup::mma_AB<acc, pt, qdesc_t, 0, 1>(dk, ds_bf, s ? q_t1 : q_t0);   // dK += dS^T Q
            };

            // dS^T into its buffer once both consumers' dQ wgmmas of iteration it - 2 read it.
            if (it >= 2) wait(ds_free[buf], ((it - 2) / 2) & 1);
            warpgroup::store(ds_s[buf][wg], ds_bf);
            detail::fence_async_shared();
            __syncwarp();  // the whole warp's stores and fences before lane 0's (release) arrival
            warp::arrive(ds_full[buf]);
            // The previous iteration's dQ, added while this iteration's dV and dK wgmmas run
            // (registers: dQ, P^T, dS^T, dK, dV).
            if (ui >= 1) {
                dq_step(it - 1, prev, dv_dk, std::integral_constant<int, 2>{});
            } else {
                dv_dk();
            }
            warpgroup::mma_async_wait();
            warp::arrive(qo_free[s]);  // this warp no longer reads Q, dO, lse2, delta of the stage
        }
        const int iters = un.iters(heads), last = base + iters - 1;
        if (iters > 0) {
            dq_step(last, prev, [] {}, std::integral_constant<int, 0>{});
        }
        // Deterministic mode: the staging block (reused for dK / dV below) once the last dQ was
        // read.
        if (DET && has_dq && iters > 0) wait(dq_read[wg], last & 1);

        // dK = scale * sum dS^T Q. Once neither consumer's dQ wgmmas read K any more (each waited
        // for its own before this barrier), dK and dV leave as bf16 through the K and V tiles, or,
        // when several CTAs share the key block, are added in fp32 through the dQ staging tile.
        asm volatile("bar.sync %0, %1;\n" ::"n"(BAR_DS), "n"(BWD_CONSUMERS * 128));
        warp::mul(dk, dk, scale);
        const int kt = un.kvb * BWD_CONSUMERS + wg;  // this consumer's 64-key tile
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
            // Deterministic mode: this split part's own slice, (split * B, Skv, Hkv, D).
            const int slice_b = DET ? (cta.x % g.split) * gridDim.y + b : b;
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
                    const auto& acc = t < PARTS ? g.dk_acc : g.dv_acc;
                    const auto at = coord<dq_tile>(slice_b, kt, hkv, t % PARTS);
                    using namespace tma;
                    if constexpr (DET) {
                        store_async<dim::DEPTH, cache_policy::NORMAL>(acc, dq_s[wg], at);
                    } else {
                        store_add_async<dim::DEPTH, cache_policy::NORMAL>(acc, dq_s[wg], at);
                    }
                }
            }
        }
        if (warpgroup::laneid() == 0) {
            tma::store_async_read_wait<0>();
            if (u + 1 < n_units) arrive(kv_free);  // K, V, staging tile free for the next unit
        }
        base += iters;
    }
}

// ---------------------------------------------------------------------------------------------
// 3. dq = bf16(dq_acc * scale), one CTA per dQ block: its fragment-ordered floats are read
// coalesced, put back by row and column in shared memory, and leave as 128-byte bf16 row pieces.
template <int D>
__global__ __launch_bounds__(256) void dq_block_convert_kernel(const float4* __restrict__ acc,
                                                               bf16* __restrict__ dq, int sq,
                                                               int hq, int n_qt, float scale) {
    using C = bwd_cfg<D>;
    static_assert(C::DQ_COLS == 64, "four threads per 64-column row below");
    __shared__ float tile[BWD_Q][C::DQ_COLS + 1];  // + 1: fewer bank conflicts on the scatter
    const long blk = blockIdx.x;
    const int part = blk % C::DQ_PARTS;
    const long tile_id = blk / C::DQ_PARTS;  // (b * Hq + h) * n_qt + qt
    const int qt = tile_id % n_qt, h = (tile_id / n_qt) % hq;
    const long b = tile_id / ((long)n_qt * hq);
    const float4* src = acc + blk * (C::DQ_BLOCK / 4);
    for (int i = threadIdx.x; i < C::DQ_BLOCK / 4; i += blockDim.x) {
        const float4 v = src[i];
        const int2 rc = dq_block_coords(i / 128, i % 128);
        tile[rc.x][rc.y] = v.x;
        tile[rc.x][rc.y + 1] = v.y;
        tile[rc.x + 8][rc.y] = v.z;
        tile[rc.x + 8][rc.y + 1] = v.w;
    }
    __syncthreads();
    const int r = threadIdx.x / 4, c0 = (threadIdx.x % 4) * 16;
    const int row = qt * BWD_Q + r;
    if (row >= sq) return;  // padded query rows (their partials are zero)
    alignas(16) bf16_2 vals[8];
#pragma unroll
    for (int j = 0; j < 8; j++) {
        vals[j] = __floats2bfloat162_rn(tile[r][c0 + 2 * j] * scale,
                                        tile[r][c0 + 2 * j + 1] * scale);
    }
    uint4* dst =
        reinterpret_cast<uint4*>(dq + ((b * sq + row) * hq + h) * D + part * C::DQ_COLS + c0);
    dst[0] = reinterpret_cast<const uint4*>(vals)[0];
    dst[1] = reinterpret_cast<const uint4*>(vals)[1];
}

// dk, dv = bf16(sum of the slices * scale) from their (slices * B, Skv, Hkv, D) fp32
// accumulators when split > 1; the slices (deterministic mode: one per split part) in order.
__global__ void acc_convert_kernel(const float4* __restrict__ acc, bf16_2* __restrict__ out,
                                   long n4, int slices, float scale) {
    const long step = (long)gridDim.x * blockDim.x;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < n4; i += step) {
        float4 v = acc[i];
        for (int j = 1; j < slices; j++) {
            const float4 w = acc[j * n4 + i];
            v = make_float4(v.x + w.x, v.y + w.y, v.z + w.z, v.w + w.w);
        }
        out[2 * i] = __floats2bfloat162_rn(v.x * scale, v.y * scale);
        out[2 * i + 1] = __floats2bfloat162_rn(v.z * scale, v.w * scale);
    }
}

template <int D>
void run_bwd(const void* dout, const void* q, const void* k, const void* v, const void* out,
             const float* lse, const float* dlse, float* delta, float* lse2, float* dq_acc,
             float* dkv_acc, int* locks, void* dq, void* dk, void* dv, int b, int sq, int skv,
             int hq, int hkv, bool causal, cudaStream_t stream) {
    using C = bwd_cfg<D>;
    const int sp = padded_len(sq);
    const int split = kv_split(b, hq, hkv, skv, detail::num_sms());
    const size_t kv_elems = (size_t)b * skv * hkv * D;
    const int slices = locks != nullptr ? split : 1;  // of each dK / dV accumulator
    detail::require(split == 1 || dkv_acc != nullptr,
                    "attention backward: the dK/dV accumulator workspace is missing");
    if (split > 1 && slices == 1) {  // deterministic mode stores every slice element instead
        detail::check_cuda(cudaMemsetAsync(dkv_acc, 0, 2 * kv_elems * sizeof(float), stream),
                           "attention backward dK/dV accumulator zeroing");
    }
    const int n_qt = sp / BWD_Q;
    const long dq_blocks = (long)b * hq * n_qt * C::DQ_PARTS;
    if (locks == nullptr) {  // (deterministic mode: key block 0 stores the first partials)
        detail::check_cuda(
            cudaMemsetAsync(dq_acc, 0, dq_blocks * C::DQ_BLOCK * sizeof(float), stream),
            "attention backward dQ accumulator zeroing");
    } else {
        detail::check_cuda(
            cudaMemsetAsync(locks, 0, lock_count(b, sq, hq) * sizeof(int), stream),
            "attention backward deterministic-mode counters zeroing");
    }
    {
        const long rows = (long)b * sp * hq;
        const int threads = 256;
        const long blocks = (rows * 8 + threads - 1) / threads;
        prep_kernel<D><<<(unsigned)blocks, threads, 0, stream>>>(
            reinterpret_cast<const bf16*>(dout), reinterpret_cast<const bf16*>(out), lse, dlse,
            delta, lse2, b, sq, sp, hq);
        detail::check_cuda(cudaGetLastError(), "attention backward prep launch");
    }
    // fp32 (slices * B, Skv, Hkv, D) dK / dV accumulators; with split == 1 they are never touched
    // and only need a valid descriptor, so they point at dq_acc with a one-row shape.
    auto acc_gl = [&](float* p) {
        return split > 1
                   ? typename C::dq_gl{p, (size_t)b * slices, (size_t)skv, (size_t)hkv, (size_t)D}
                   : typename C::dq_gl{p, 1, 1, 1, (size_t)D};
    };
    bwd_globals<D> g{make_bshd<typename C::q_gl>(q, b, sq, hq, D),
                     make_bshd<typename C::q_gl>(dout, b, sq, hq, D),
                     make_bshd<typename C::kv_gl>(k, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(v, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(dk, b, skv, hkv, D),
                     make_bshd<typename C::kv_gl>(dv, b, skv, hkv, D),
                     acc_gl(split > 1 ? dkv_acc : dq_acc),
                     acc_gl(split > 1 ? dkv_acc + slices * kv_elems : dq_acc),
                     typename C::vec_gl{lse2, nullptr, (size_t)b, (size_t)hq, (size_t)sp},
                     typename C::vec_gl{delta, nullptr, (size_t)b, (size_t)hq, (size_t)sp},
                     dq_acc, locks, sq, skv, hq, hq / hkv, split};
    dim3 grid(hkv * split, b, bwd_grid_z(skv, bwd_paired(causal, locks != nullptr, split)));
    auto launch = [&](auto kernel) {
        detail::set_smem(kernel, C::SMEM);
        kernel<<<grid, BWD_THREADS, C::SMEM, stream>>>(g);
    };
    if (locks != nullptr) {
        if (causal) launch(bwd_kernel<D, true, true>);
        else launch(bwd_kernel<D, false, true>);
    } else {
        if (causal) launch(bwd_kernel<D, true, false>);
        else launch(bwd_kernel<D, false, false>);
    }
    detail::check_cuda(cudaGetLastError(), "attention backward launch");
    dq_block_convert_kernel<D><<<(unsigned)dq_blocks, 256, 0, stream>>>(
        reinterpret_cast<const float4*>(dq_acc), reinterpret_cast<bf16*>(dq), sq, hq, n_qt,
        1.f / std::sqrt((float)D));
    detail::check_cuda(cudaGetLastError(), "attention backward dQ conversion launch");
    auto convert = [&](const float* acc, void* out, long n) {
        const long n4 = n / 4;  // D is a multiple of 4
        const int blocks = (int)std::min<long>((n4 + 255) / 256, 65535L * 4);
        acc_convert_kernel<<<blocks, 256, 0, stream>>>(reinterpret_cast<const float4*>(acc),
                                                        reinterpret_cast<bf16_2*>(out), n4, slices,
                                                        1.f);
        detail::check_cuda(cudaGetLastError(), "attention backward conversion launch");
    };
    if (split > 1) {
        convert(dkv_acc, dk, (long)kv_elems);
        convert(dkv_acc + slices * kv_elems, dv, (long)kv_elems);
    }
}

}  // namespace attn

int attn_bwd_padded_len(int sq) { return attn::padded_len(sq); }

int attn_bwd_kv_split(int b, int hq, int hkv, int skv) {
    return attn::kv_split(b, hq, hkv, skv, detail::num_sms());
}

long attn_bwd_lock_count(int b, int sq, int hq) { return attn::lock_count(b, sq, hq); }

void attn_bwd(const void* dout, const void* q, const void* k, const void* v, const void* out,
              const float* lse, const float* dlse, float* delta, float* lse2, float* dq_acc,
              float* dkv_acc, int* locks, void* dq, void* dk, void* dv, int b, int sq, int skv,
              int hq, int hkv, int d, bool causal, cudaStream_t stream) {
    detail::require(b > 0 && sq > 0 && skv > 0 && hq > 0 && hkv > 0, "attention: empty shape");
    detail::require(hq % hkv == 0, "attention: Hq must be a multiple of Hkv");
    detail::require(!causal || sq == skv, "attention: causal needs Sq == Skv");
    detail::require(b <= 65535 && hkv <= 65535, "attention: batch or heads too large for the grid");
    if (d == 128)
        attn::run_bwd<128>(dout, q, k, v, out, lse, dlse, delta, lse2, dq_acc, dkv_acc, locks, dq,
                           dk, dv, b, sq, skv, hq, hkv, causal, stream);
    else if (d == 64)
        attn::run_bwd<64>(dout, q, k, v, out, lse, dlse, delta, lse2, dq_acc, dkv_acc, locks, dq,
                          dk, dv, b, sq, skv, hq, hkv, causal, stream);
    else detail::require(false, "attention: head dim must be 64 or 128");
}

}  // namespace titankit_tk
