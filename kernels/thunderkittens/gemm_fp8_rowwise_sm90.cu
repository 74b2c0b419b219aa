// FP8 (e4m3) GEMM with rowwise scales and bf16 output for Hopper (sm_90a), on ThunderKittens tiles.
//
//   C (M, N) = (A (M, K) @ B (N, K)^T) * scale_a[m] * scale_b[n]
//
// Both operands are K-major, as wgmma's fp8 path requires. Structure (the CUTLASS "warp-specialised
// persistent cooperative" design, written with TK's tile API):
//   - a persistent grid of one CTA per SM walks the 128 x 256 output tiles in M-grouped order (tiles
//     that share B columns run close together in time, so B stays in L2);
//   - warpgroup 2 is the producer: one thread streams 128-deep K slices of A (2 x 64 x 128) and
//     B (256 x 128) through a 4-stage TMA ring (48 KB per stage), completing on mbarriers;
//   - warpgroups 0 and 1 are consumers: each owns 64 rows of the tile, issues m64n256k32 QGMMAs from
//     shared memory into a 64 x 256 fp32 accumulator (128 registers per thread), keeps one wgmma group
//     in flight, and frees a stage as soon as the wgmma that read it retired;
//   - the epilogue scales rows and columns in fp32 (the column scales loaded during the last K
//     slice and shared through a staging tile; tensorwise, by one product of the two scales)
//     and rounds to bf16 into registers (64 per thread) as soon as a tile's wgmmas are
//     done; the stores of those registers (through two 64 x 64 staging tiles per consumer and TMA
//     stores, which clip the M tail and whole 64-column chunks past N) wait until the next tile's
//     first two K slices are issued, so the tensor cores run through them. Both consumers share a
//     tile and reach its end together; stored right away, the epilogue held about 9% of the
//     consumers' warp samples (Nsight Compute on an H200), with no wgmma in flight. Split, the
//     kernel reached 98-100% of cuBLAS at 8192^3 (docs/benchmarks.md section 5a).
//
// Grid and stream-K tail (make_plan). A tile count that is a whole number of waves on a few SMs
// fewer than the GPU has runs on that many CTAs: 8192^3's 2048 tiles are 16 waves of 128 CTAs on
// the 132 SMs of an H200. Four idle SMs cost less than the half-empty 16th wave of 132 CTAs: 128
// busy SMs run faster than 132 (under the 700 W cap they may clock higher; they also share L2
// among fewer; not separated), and that beat the previous plan by 0-7% at three model shapes
// (docs/benchmarks.md 5p). Other counts run data-parallel on all SMs, except when
// a small remainder of tiles would leave a second wave nearly empty: then (CUTLASS's
// data-parallel + stream-K hybrid) the first tiles - sk_tiles tiles go round-robin as whole tiles,
// and the K slices of the last sk_tiles = tiles % grid + grid tiles (the last full wave plus the
// partial one; under that rule, every tile) are split evenly over all CTAs, each taking one
// contiguous range of (tile, K slice) pairs. Stream-K CTAs read different K slices of different
// tiles at once, so fewer fills hit L2 (a guess, not measured); in 5p it cost 0.4-0.6 of a tile's
// time at K = 8192 and about one tile at K = 28672, more than a data-parallel tail loses unless
// that tail is a small part of a wave.
//   - Every CTA's share is longer than a tile (sk_tiles > grid), so a tile is split in at most two
//     pieces: its start (the end of CTA i's range) and its end (the start of CTA i + 1's range).
//   - CTA i + 1 does that end piece first in its range: it writes the fp32 accumulator to its slot
//     of `partials` and sets its flag (per consumer warpgroup, release). CTA i does the start piece
//     last: it waits for the flag (acquire), adds the partial, and runs the normal epilogue. A CTA
//     only ever waits on its successor's first piece, which waits on nothing, so waits never chain.
//     With the GPU to itself the grid is co-resident (grid <= SMs, one CTA per SM by shared memory
//     and launch bounds), so that piece is already running. Beside other kernels (NCCL) some CTAs
//     start late. So CTA "i" is a ticket taken at start, not blockIdx: the running CTAs are always
//     tickets 0..j, only the last of them can be waiting on a CTA not yet started, and the others
//     finish and free SMs for it, whatever order the hardware dispatches CTAs in.
//   - The split depends only on (M, N, K, grid) and a tile's two pieces are added in one fixed
//     order, so results are bitwise reproducible run to run (they differ from a data-parallel run
//     in the last bits, by the order of the fp32 additions).
//   - Flags must be zero at launch: the caller zeroes them on the launch stream (ops.py: a
//     torch.zeros, one memset, graph-capturable); a kernel-side reset could race with the waits.
//   Used only where make_plan says (SK_MAX_TAIL_DIV, SK_MAX_K_SLICES), and not when the idle part
//   of the last wave is worth fewer K slices than the fixup costs (SK_FIXUP_SLICES).
// Shapes: K % 128 == 0, N % 64 == 0, any M.
#include "tk_common.cuh"
#include "tk_kernels.h"

using namespace kittens;

namespace titankit_tk {
namespace fp8gemm {

constexpr int BM = 128, BN = 256, BK = 128, STAGES = 4, CONSUMERS = 2;
constexpr int THREADS = (CONSUMERS + 1) * 128;
constexpr int SUPER_M = 16;  // M tiles per group of the tile order (L2 reuse of B)
constexpr int C_CHUNK = 64;  // epilogue column chunk
// Stream-K overhead per CTA in K slices of MMA time (~0.8 us each) at the least: one 128 KB fp32
// partial written to L2 and one read back, plus the caller's flag memset. On an H200, tiles = SMs +
// 1 ran 7% slower stream-K than data-parallel with 8 slices per tile, 30% faster with 32.
constexpr int SK_FIXUP_SLICES = 8;
// When stream-K runs at all (make_plan; docs/benchmarks.md 5p): a second wave that is at most a
// quarter full, and K loops of at most 64 slices. At 1.5 waves it lost 4-5% at K = 8192 and 22% at
// K = 28672 to data-parallel, and at 15.5-16.2 waves 0-5%; at 1.06 waves (K = 8192) it won 34%.
constexpr int SK_MAX_TAIL_DIV = 4, SK_MAX_K_SLICES = 64;

using a_tile = st_fp8e4m3<64, BK>;
using b_tile = st_fp8e4m3<BN, BK>;
using c_tile = st_bf<64, C_CHUNK>;
using a_gl = gl<fp8e4m3, 1, 1, -1, -1, a_tile>;
using b_gl = gl<fp8e4m3, 1, 1, -1, -1, b_tile>;
using c_gl = gl<bf16, 1, 1, -1, -1, c_tile>;

struct globals {
    a_gl a;
    b_gl b;
    c_gl c;
    const float* scale_a;
    const float* scale_b;
    float* partials;  // stream-K: one 128 x 256 fp32 slot per CTA (null when sk_tiles == 0)
    int* flags;       // stream-K: one flag per (CTA, consumer), then the ticket; zero at launch
    int m, n, k;
    int sk_tiles;     // tiles at the end of the order split by K over the grid; 0: none
};

constexpr int SMEM_BYTES = STAGES * (2 * sizeof(a_tile) + sizeof(b_tile)) +
                           CONSUMERS * 2 * sizeof(c_tile) + 1024;  // + alignment slack
static_assert(SMEM_BYTES <= MAX_SHARED_MEMORY - 1024, "GEMM tiles exceed shared memory");
constexpr int SLOT_FLOAT4 = 64 * BN / 4;  // one consumer's 64 x 256 fp32 partial, in float4

// Tile t -> (m tile, n tile), grouping SUPER_M consecutive m tiles per n sweep.
__device__ inline int2 tile_coords(int t, int tiles_m, int tiles_n) {
    const int per_group = SUPER_M * tiles_n;
    const int first_m = (t / per_group) * SUPER_M;
    const int group_m = min(tiles_m - first_m, SUPER_M);
    const int r = t % per_group;
    return {first_m + r % group_m, r / group_m};
}

// Calls f(tile, k_begin, k_end) for this CTA's work in order: its whole data-parallel tiles, then
// its share [i * total / grid, (i + 1) * total / grid) of the stream-K part's (tile, K slice)
// pairs, cut at tile boundaries (i = cta). Producer and consumers walk the same sequence.
template <typename F>
__device__ __forceinline__ void for_each_unit(const globals& g, int cta, int tiles, int k_iters,
                                              F&& f) {
    const int dp_tiles = tiles - g.sk_tiles;
    for (int t = cta; t < dp_tiles; t += gridDim.x) f(t, 0, k_iters);
    // 32-bit: make_plan keeps total * grid below 2^31. With 64-bit positions (and their emulated
    // 64-bit divisions) ptxas spilled 40 bytes more here.
    const int total = g.sk_tiles * k_iters;
    int pos = total * cta / gridDim.x;
    const int end = total * (cta + 1) / gridDim.x;
    while (pos < end) {
        const int t = pos / k_iters, kb = pos % k_iters;
        const int ke = end - pos < k_iters - kb ? kb + (end - pos) : k_iters;
        f(dp_tiles + t, kb, ke);
        pos += ke - kb;
    }
}

// Hides how `p` was computed, so the 32 accesses at constant offsets from it become immediates in
// the load/store instructions. Otherwise nvcc hoisted 32 separate slot indices out of the stream-K
// loop and spilled registers to hold them.
template <typename T>
__device__ __forceinline__ void opaque(T*& p) {
    asm volatile("" : "+l"(p));
}

__device__ __forceinline__ void store_release(int* p, int v) {
    asm volatile("st.release.gpu.global.b32 [%0], %1;\n" ::"l"(p), "r"(v) : "memory");
}
__device__ __forceinline__ int load_acquire(const int* p) {
    int v;
    asm volatile("ld.acquire.gpu.global.b32 %0, [%1];\n" : "=r"(v) : "l"(p) : "memory");
    return v;
}

// TENSORWISE: one scale per operand (scale_a[0], scale_b[0]), the default FP8 training recipe. The
// epilogue then multiplies by their product, one FMUL per element, and loads no column scales:
// the per-column loads and the second multiply are most of the scaling cost that section 5b of
// docs/benchmarks.md measured. Same bits as the rowwise path on expanded scales (sa * sb first).
template <bool TENSORWISE>
__global__ __launch_bounds__(THREADS, 1) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    tma_swizzle_allocator al((int*)&smem[0]);
    a_tile(&a_s)[STAGES][2] = al.allocate<a_tile, STAGES, 2>();
    b_tile(&b_s)[STAGES] = al.allocate<b_tile, STAGES>();
    c_tile(&c_s)[CONSUMERS][2] = al.allocate<c_tile, CONSUMERS, 2>();
    __shared__ semaphore full[STAGES], empty[STAGES];
    __shared__ int ticket;  // stream-K: this CTA's place in start order (see the header)

    const int tiles_m = (g.m + BM - 1) / BM, tiles_n = (g.n + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n, k_iters = (g.k + BK - 1) / BK;
    const int wg = detail::warpgroup_index();

    if (threadIdx.x == 0) {
        ticket = g.sk_tiles > 0 ? atomicAdd(&g.flags[gridDim.x * CONSUMERS], 1) : blockIdx.x;
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(full[s], 0, 1);           // completed by the producer's expect_tx + bytes
            init_semaphore(empty[s], CONSUMERS * 4, 0);  // one arrival per consumer warp
        }
    }
    __syncthreads();
    const int cta = ticket;

    if (wg == CONSUMERS) {  // producer warpgroup
        warpgroup::decrease_registers<40>();
        if (warpgroup::laneid() == 0) {
            int it = 0;
            for_each_unit(g, cta, tiles, k_iters, [&](int t, int kb, int ke) {
                const int2 mn = tile_coords(t, tiles_m, tiles_n);
                for (int kk = kb; kk < ke; kk++, it++) {
                    const int s = it % STAGES;
                    wait(empty[s], ((it / STAGES) & 1) ^ 1);  // fresh barrier: passes at once
                    tma::expect_bytes(full[s], 2 * sizeof(a_tile) + sizeof(b_tile));
                    tma::load_async(a_s[s][0], g.a, {2 * mn.x, kk}, full[s]);
                    tma::load_async(a_s[s][1], g.a, {2 * mn.x + 1, kk}, full[s]);
                    tma::load_async(b_s[s], g.b, {mn.y, kk}, full[s]);
                }
            });
        }
        return;
    }

    warpgroup::increase_registers<232>();
    rt_fl<16, BN> acc;  // this warp's 16 rows of the consumer's 64 x 256 block
    // The previous tile's output, scaled and rounded, waiting to be stored (out_mn.x < 0: none).
    // Its stores run after the next tile's first two K slices are issued, so the tensor cores work
    // through them; only the scaling and rounding leave them idle between tiles. With `acc` this
    // needs ~230 registers. ptxas (nvcc 13.0) spills nothing; the stream-K part spilled 76 bytes
    // until its positions became 32-bit and its slot pointers opaque (for_each_unit, opaque).
    rt_bf<16, BN> out;
    int2 out_mn = {-1, -1};
    const int lane = laneid(), warp = warpgroup::warpid(), tid = warpgroup::laneid();
    int it = 0, chunk = 0;

    auto store_out = [&]() {  // `out` to C through the staging tiles and TMA stores
#pragma unroll
        for (int c = 0; c < BN / C_CHUNK; c++, chunk++) {
            auto& part = *reinterpret_cast<rt_bf<16, C_CHUNK>*>(&out.tiles[0][c * C_CHUNK / 16]);
            c_tile& buf = c_s[wg][chunk % 2];
            // The TMA store issued two chunks ago from this buffer must have finished reading it.
            if (tid == 0) tma::store_async_read_wait<1>();
            warpgroup::sync(wg + 1);
            warpgroup::store(buf, part);
            detail::fence_async_shared();
            warpgroup::sync(wg + 1);
            if (tid == 0) {
                tma::store_async(g.c, buf, {2 * out_mn.x + wg, out_mn.y * (BN / C_CHUNK) + c});
            }
        }
        out_mn = {-1, -1};
    };

    for_each_unit(g, cta, tiles, k_iters, [&](int t, int kb, int ke) {
        const int2 mn = tile_coords(t, tiles_m, tiles_n);
        const int store_at = min(kb + 1, ke - 1);  // after this slice's wgmmas are issued
        int prev = -1;
        for (int kk = kb; kk < ke; kk++, it++) {
            const int s = it % STAGES;
            wait(full[s], (it / STAGES) & 1);
            if (kk == kb) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
            else warpgroup::mma_ABt(acc, a_s[s][wg], b_s[s]);
            if (kk == store_at && out_mn.x >= 0) store_out();
            warpgroup::mma_async_wait<1>();  // the wgmma of the previous slice has retired
            if (prev >= 0) warp::arrive(empty[prev]);
            prev = s;
        }
        // Rowwise: this unit's scales, loaded while its last wgmmas run. Each thread loads two of
        // the tile's 256 column scales (cols 2 * tid, + 1); the epilogue shares them through shared
        // memory. Loaded in the epilogue, 64 per thread with a bounds check each, the loads, their
        // index arithmetic and their latency were most of the scaling's cost (docs/benchmarks.md
        // section 5b); this way the rowwise kernel gained up to 1.6%, level at K = 28672 (section 5i).
        float sa0 = 0.f, sa1 = 0.f, sb0 = 0.f, sb1 = 0.f;
        if constexpr (!TENSORWISE) {
            const int r0 = mn.x * BM + wg * 64 + warp * 16 + lane / 4;
            if (r0 < g.m) sa0 = g.scale_a[r0];
            if (r0 + 8 < g.m) sa1 = g.scale_a[r0 + 8];
            const int col = mn.y * BN + 2 * tid;  // N % 64 == 0: col + 1 < N when col < N
            if (col < g.n) sb0 = g.scale_b[col], sb1 = g.scale_b[col + 1];
        }
        warpgroup::mma_async_wait<0>();
        warp::arrive(empty[prev]);

        // Stream-K pieces. Slots are laid out [float4 index][thread] so every store and load of a
        // warp covers 512 contiguous bytes; the partial is read once, so it bypasses L1 (.cg).
        if (kb > 0) {  // a tile's end piece, this CTA's first stream-K unit: hand it to CTA i - 1
            float4* slot = reinterpret_cast<float4*>(g.partials) +
                           (size_t)(cta * CONSUMERS + wg) * SLOT_FLOAT4 + tid;
            opaque(slot);
#pragma unroll
            for (int j = 0; j < BN / 16; j++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float2 x = acc.tiles[0][j].data[2 * h], y = acc.tiles[0][j].data[2 * h + 1];
                    __stcg(slot + (2 * j + h) * 128, make_float4(x.x, x.y, y.x, y.y));
                }
            }
            __threadfence();          // each thread's partial is visible GPU-wide, and then
            warpgroup::sync(wg + 1);  // all 128 threads are past that point: publish
            if (tid == 0) store_release(&g.flags[cta * CONSUMERS + wg], 1);
            return;
        }
        if (ke < k_iters) {  // a tile's start piece: its end is CTA i + 1's first unit
            const int peer = (cta + 1) * CONSUMERS + wg;
            while (load_acquire(&g.flags[peer]) == 0) __nanosleep(64);  // every thread acquires
            const float4* slot = reinterpret_cast<const float4*>(g.partials) +
                                 (size_t)peer * SLOT_FLOAT4 + tid;
            opaque(slot);
#pragma unroll
            for (int j = 0; j < BN / 16; j++) {
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const float4 p = __ldcg(slot + (2 * j + h) * 128);
                    float2 &x = acc.tiles[0][j].data[2 * h], &y = acc.tiles[0][j].data[2 * h + 1];
                    x.x += p.x, x.y += p.y, y.x += p.z, y.y += p.w;
                }
            }
        }

        // Scale in fp32 and round to bf16 into `out`. The stores follow in the next unit (or below).
        if constexpr (TENSORWISE) {
            const float s = g.scale_a[0] * g.scale_b[0];
#pragma unroll
            for (int j = 0; j < BN / 16; j++) {
#pragma unroll
                for (int e = 0; e < 4; e++) {
                    acc.tiles[0][j].data[e].x *= s;
                    acc.tiles[0][j].data[e].y *= s;
                }
            }
        } else {
            // The column scales go through staging buffer 0, which no TMA store still reads after
            // the wait: the last store_out ended on buffer 1 (an even number of chunks), and the
            // next one syncs the warpgroup before it writes buffer 0, so these reads are done by then.
            static_assert((BN / C_CHUNK) % 2 == 0, "store_out must end on staging buffer 1");
            // Shared-space addresses: through a generic pointer nvcc emits generic loads (LD, not LDS).
            const uint32_t sb_s = static_cast<uint32_t>(__cvta_generic_to_shared(&c_s[wg][0].data[0]));
            if (tid == 0) tma::store_async_read_wait<1>();
            warpgroup::sync(wg + 1);
            move<float2>::sts(sb_s + 8 * tid, make_float2(sb0, sb1));
            warpgroup::sync(wg + 1);
            // Rows r0, r0 + 8 of this thread; columns per 16-wide subtile j: 2 * (lane % 4) +
            // {0, 1} and + 8 (TK's row-layout fragment, the wgmma accumulator layout).
#pragma unroll
            for (int j = 0; j < BN / 16; j++) {
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    float2 sb;
                    move<float2>::lds(sb, sb_s + 8 * (j * 8 + half * 4 + lane % 4));
                    float2& top = acc.tiles[0][j].data[2 * half];     // row r0
                    float2& bot = acc.tiles[0][j].data[2 * half + 1]; // row r0 + 8
                    top.x *= sa0 * sb.x;
                    top.y *= sa0 * sb.y;
                    bot.x *= sa1 * sb.x;
                    bot.y *= sa1 * sb.y;
                }
            }
        }
        warp::copy(out, acc);
        out_mn = mn;
    });
    if (out_mn.x >= 0) store_out();
    if (tid == 0) tma::store_async_read_wait<0>();
}

// The launch for (m, n, k) on this device (Fp8GemmPlan, tk_kernels.h).
Fp8GemmPlan make_plan(int m, int n, int k) {
    const int tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN), k_iters = k / BK;
    const int sms = detail::num_sms();
    if (tiles <= sms) return {tiles, 0};
    // Whole waves on up to 5% fewer SMs (on 132: 126-132 CTAs).
    for (int g = sms; g * 20 >= sms * 19; g--) {
        if (tiles % g == 0) return {g, 0};
    }
    Fp8GemmPlan p{sms, 0};
    const int rem = tiles % sms;
    // Data-parallel, the last wave idles (sms - rem) / sms of k_iters slices per CTA; stream-K
    // recovers that for its overhead (SK_FIXUP_SLICES at the least).
    if (tiles < 2 * sms && rem * SK_MAX_TAIL_DIV <= sms && k_iters <= SK_MAX_K_SLICES &&
        (long long)(sms - rem) * k_iters > (long long)SK_FIXUP_SLICES * sms &&
        (long long)(rem + sms) * k_iters * sms < (1LL << 31)) {  // for_each_unit's int math
        p.sk_tiles = rem + sms;  // > grid: every CTA's share exceeds a tile (two pieces max)
    }
    return p;
}

}  // namespace fp8gemm

Fp8GemmPlan fp8_gemm_rowwise_plan(int m, int n, int k) {
    if (m <= 0 || n <= 0 || k <= 0) return {0, 0};
    return fp8gemm::make_plan(m, n, k);
}

Fp8GemmWorkspace fp8_gemm_rowwise_workspace(int m, int n, int k) {
    using namespace fp8gemm;
    const Fp8GemmPlan p = fp8_gemm_rowwise_plan(m, n, k);
    if (p.sk_tiles == 0) return {0, 0};
    return {(int64_t)p.grid * CONSUMERS * SLOT_FLOAT4 * 4, (int64_t)p.grid * CONSUMERS + 1};
}

void fp8_gemm_rowwise(const void* a, const void* b, const float* scale_a, const float* scale_b,
                      bool tensorwise, void* c, int m, int n, int k, float* partials, int* flags,
                      cudaStream_t stream) {
    using namespace fp8gemm;
    detail::require(m > 0 && n > 0 && k > 0, "fp8_gemm_rowwise: M, N, K must be positive");
    // TK's swizzled TMA boxes address a row in 128-byte chunks and do not clip inside a chunk, so
    // K (A/B rows of 128 e4m3) and N (C rows of 64 bf16) must be whole chunks; M is free.
    detail::require(k % 128 == 0, "fp8_gemm_rowwise: K must be a multiple of 128");
    detail::require(n % 64 == 0, "fp8_gemm_rowwise: N must be a multiple of 64");
    const Fp8GemmPlan p = make_plan(m, n, k);
    detail::require(p.sk_tiles == 0 || (partials != nullptr && flags != nullptr),
                    "fp8_gemm_rowwise: this shape needs the stream-K workspace "
                    "(fp8_gemm_rowwise_workspace)");
    auto* pa = reinterpret_cast<fp8e4m3*>(const_cast<void*>(a));
    auto* pb = reinterpret_cast<fp8e4m3*>(const_cast<void*>(b));
    globals g{a_gl{pa, nullptr, nullptr, (size_t)m, (size_t)k},
              b_gl{pb, nullptr, nullptr, (size_t)n, (size_t)k},
              c_gl{reinterpret_cast<bf16*>(c), nullptr, nullptr, (size_t)m, (size_t)n},
              scale_a, scale_b, partials, flags, m, n, k, p.sk_tiles};
    auto launch = [&](auto kernel) {
        detail::set_smem(kernel, SMEM_BYTES);
        kernel<<<p.grid, THREADS, SMEM_BYTES, stream>>>(g);
    };
    if (tensorwise) launch(gemm_kernel<true>);
    else launch(gemm_kernel<false>);
    detail::check_cuda(cudaGetLastError(), "fp8_gemm_rowwise launch");
}

}  // namespace titankit_tk
