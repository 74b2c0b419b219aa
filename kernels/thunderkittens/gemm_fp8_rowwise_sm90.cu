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
//   - the epilogue scales rows and columns in fp32, rounds to bf16 and leaves through two 64 x 64
//     staging tiles per consumer and TMA stores (which clip the M tail and whole 64-column chunks
//     past N); the producer already streams the next tile's K slices meanwhile.
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
    int m, n, k;
};

constexpr int SMEM_BYTES = STAGES * (2 * sizeof(a_tile) + sizeof(b_tile)) +
                           CONSUMERS * 2 * sizeof(c_tile) + 1024;  // + alignment slack
static_assert(SMEM_BYTES <= MAX_SHARED_MEMORY - 1024, "GEMM tiles exceed shared memory");

// Tile t -> (m tile, n tile), grouping SUPER_M consecutive m tiles per n sweep.
__device__ inline int2 tile_coords(int t, int tiles_m, int tiles_n) {
    const int per_group = SUPER_M * tiles_n;
    const int first_m = (t / per_group) * SUPER_M;
    const int group_m = min(tiles_m - first_m, SUPER_M);
    const int r = t % per_group;
    return {first_m + r % group_m, r / group_m};
}

__global__ __launch_bounds__(THREADS, 1) void gemm_kernel(const __grid_constant__ globals g) {
    extern __shared__ alignment_dummy smem[];
    tma_swizzle_allocator al((int*)&smem[0]);
    a_tile(&a_s)[STAGES][2] = al.allocate<a_tile, STAGES, 2>();
    b_tile(&b_s)[STAGES] = al.allocate<b_tile, STAGES>();
    c_tile(&c_s)[CONSUMERS][2] = al.allocate<c_tile, CONSUMERS, 2>();
    __shared__ semaphore full[STAGES], empty[STAGES];

    const int tiles_m = (g.m + BM - 1) / BM, tiles_n = (g.n + BN - 1) / BN;
    const int tiles = tiles_m * tiles_n, k_iters = (g.k + BK - 1) / BK;
    const int wg = warpgroup::groupid();

    if (threadIdx.x == 0) {
        for (int s = 0; s < STAGES; s++) {
            init_semaphore(full[s], 0, 1);           // completed by the producer's expect_tx + bytes
            init_semaphore(empty[s], CONSUMERS * 4, 0);  // one arrival per consumer warp
        }
    }
    __syncthreads();

    if (wg == CONSUMERS) {  // producer warpgroup
        warpgroup::decrease_registers<40>();
        if (warpgroup::laneid() == 0) {
            int it = 0;
            for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
                const int2 mn = tile_coords(t, tiles_m, tiles_n);
                for (int kk = 0; kk < k_iters; kk++, it++) {
                    const int s = it % STAGES;
                    wait(empty[s], ((it / STAGES) & 1) ^ 1);  // fresh barrier: passes at once
                    tma::expect_bytes(full[s], 2 * sizeof(a_tile) + sizeof(b_tile));
                    tma::load_async(a_s[s][0], g.a, {2 * mn.x, kk}, full[s]);
                    tma::load_async(a_s[s][1], g.a, {2 * mn.x + 1, kk}, full[s]);
                    tma::load_async(b_s[s], g.b, {mn.y, kk}, full[s]);
                }
            }
        }
        return;
    }

    warpgroup::increase_registers<232>();
    rt_fl<16, BN> acc;  // this warp's 16 rows of the consumer's 64 x 256 block
    const int lane = laneid(), warp = warpgroup::warpid();
    int it = 0, chunk = 0;
    for (int t = blockIdx.x; t < tiles; t += gridDim.x) {
        const int2 mn = tile_coords(t, tiles_m, tiles_n);
        int prev = -1;
        for (int kk = 0; kk < k_iters; kk++, it++) {
            const int s = it % STAGES;
            wait(full[s], (it / STAGES) & 1);
            if (kk == 0) warpgroup::mm_ABt(acc, a_s[s][wg], b_s[s]);
            else warpgroup::mma_ABt(acc, a_s[s][wg], b_s[s]);
            warpgroup::mma_async_wait<1>();  // the wgmma of the previous slice has retired
            if (prev >= 0) warp::arrive(empty[prev]);
            prev = s;
        }
        warpgroup::mma_async_wait<0>();
        warp::arrive(empty[prev]);

        // Epilogue: rows r0, r0 + 8 of this thread; columns per 16-wide subtile j: 2 * (lane % 4) +
        // {0, 1} and + 8 (TK's row-layout fragment, the wgmma accumulator layout).
        const int r0 = mn.x * BM + wg * 64 + warp * 16 + lane / 4;
        const float sa0 = r0 < g.m ? g.scale_a[r0] : 0.f;
        const float sa1 = r0 + 8 < g.m ? g.scale_a[r0 + 8] : 0.f;
#pragma unroll
        for (int c = 0; c < BN / C_CHUNK; c++, chunk++) {
            auto& part = *reinterpret_cast<rt_fl<16, C_CHUNK>*>(&acc.tiles[0][c * C_CHUNK / 16]);
#pragma unroll
            for (int j = 0; j < C_CHUNK / 16; j++) {
#pragma unroll
                for (int half = 0; half < 2; half++) {
                    const int col = mn.y * BN + c * C_CHUNK + j * 16 + half * 8 + 2 * (lane % 4);
                    const float sb0 = col < g.n ? g.scale_b[col] : 0.f;
                    const float sb1 = col + 1 < g.n ? g.scale_b[col + 1] : 0.f;
                    float2& top = part.tiles[0][j].data[2 * half];     // row r0
                    float2& bot = part.tiles[0][j].data[2 * half + 1]; // row r0 + 8
                    top.x *= sa0 * sb0;
                    top.y *= sa0 * sb1;
                    bot.x *= sa1 * sb0;
                    bot.y *= sa1 * sb1;
                }
            }
            rt_bf<16, C_CHUNK> out;
            warp::copy(out, part);
            c_tile& buf = c_s[wg][chunk % 2];
            // The TMA store issued two chunks ago from this buffer must have finished reading it.
            if (warpgroup::laneid() == 0) tma::store_async_read_wait<1>();
            warpgroup::sync(wg + 1);
            warpgroup::store(buf, out);
            detail::fence_async_shared();
            warpgroup::sync(wg + 1);
            if (warpgroup::laneid() == 0) {
                tma::store_async(g.c, buf, {2 * mn.x + wg, mn.y * (BN / C_CHUNK) + c});
            }
        }
    }
    if (warpgroup::laneid() == 0) tma::store_async_read_wait<0>();
}

}  // namespace fp8gemm

void fp8_gemm_rowwise(const void* a, const void* b, const float* scale_a, const float* scale_b,
                      void* c, int m, int n, int k, cudaStream_t stream) {
    using namespace fp8gemm;
    detail::require(m > 0 && n > 0 && k > 0, "fp8_gemm_rowwise: M, N, K must be positive");
    // TK's swizzled TMA boxes address a row in 128-byte chunks and do not clip inside a chunk, so
    // K (A/B rows of 128 e4m3) and N (C rows of 64 bf16) must be whole chunks; M is free.
    detail::require(k % 128 == 0, "fp8_gemm_rowwise: K must be a multiple of 128");
    detail::require(n % 64 == 0, "fp8_gemm_rowwise: N must be a multiple of 64");
    auto* pa = reinterpret_cast<fp8e4m3*>(const_cast<void*>(a));
    auto* pb = reinterpret_cast<fp8e4m3*>(const_cast<void*>(b));
    globals g{a_gl{pa, nullptr, nullptr, (size_t)m, (size_t)k},
              b_gl{pb, nullptr, nullptr, (size_t)n, (size_t)k},
              c_gl{reinterpret_cast<bf16*>(c), nullptr, nullptr, (size_t)m, (size_t)n},
              scale_a, scale_b, m, n, k};
    const int tiles = ((m + BM - 1) / BM) * ((n + BN - 1) / BN);
    const int grid = tiles < detail::num_sms() ? tiles : detail::num_sms();
    detail::set_smem(gemm_kernel, SMEM_BYTES);
    gemm_kernel<<<grid, THREADS, SMEM_BYTES, stream>>>(g);
    detail::check_cuda(cudaGetLastError(), "fp8_gemm_rowwise launch");
}

}  // namespace titankit_tk
