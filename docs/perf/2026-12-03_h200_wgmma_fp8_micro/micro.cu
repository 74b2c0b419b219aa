// FP8 wgmma rate per SM clock on Hopper, with and without concurrent TMA fills (docs/benchmarks.md
// section 5h). One CTA per SM, two consumer warpgroups issuing wgmmas from fixed shared tiles for
// `iters` K slices of 128 (4 k32 steps each; the same 4.2 MFLOP per warpgroup and slice in every
// mode):
//   mode 0  m64n256k32, one 64 x 256 accumulator per warpgroup (the committed GEMM's mainloop)
//   mode 1  two m64n128k32 on the same A and the two halves of B (section 5b's N = 128 split)
//   mode 2  two m64n128k32 on two A tiles and one 128-wide B (the 256 x 128 tiles of section 5g)
// fill: a producer thread TMA-loads 48 KB per slice (the GEMM's ring stage: two 64 x 128 A tiles,
// one 256 x 128 B tile) from 6 MB of an operand (L2-resident) into a 2-stage ring nobody reads,
// at most one slice ahead of the consumers: shared memory takes the GEMM's fill traffic beside
// the wgmmas (fill 1). fill 2 couples them as in the GEMM: a 3-stage ring, the consumers wait for
// slice i's stage to land before issuing slice i's wgmmas (on the fixed tiles) and free it at
// once; the producer refills a stage when both consumers freed it.
// The fixed tiles are loaded once from the operand, which holds random e4m3 bits (CONSTANT=1: all
// 1.0). Calls 1 and 2 ran an earlier version: all-1.0 operands for the fills, and fixed tiles never
// loaded (the wgmmas read whatever shared memory held).
// Cycles per slice come from clock64 on each CTA, so the rate per clock is independent of the
// (power-limited) SM clock; TFLOP/s from CUDA events.
//   nvcc $FLAGS -o micro micro.cu ../../../kernels/thunderkittens/driver_shim.cpp -ldl && ./micro
// FILL_SWEEP=1 ./micro runs instead the sweep of docs/benchmarks.md 5k: mode 0 with partial fill
// stages (16, 32, 40 KB per slice) beside the whole one, and three consumers (a 192 x 256 tile).
// ONE_WG=1 ./micro runs instead the check of docs/benchmarks.md 5m: one consumer warpgroup issuing
// alone (CONS = 1, as in a ping-pong kernel's mainloop), no fills, with one or two K slices of
// wgmmas in flight (DEPTH), beside the two-consumer runs. ONE_WG=2 ./micro couples fills to it: a
// ping-pong consumer's stage (two 64 x 128 A tiles and a 128 x 128 B tile, 32 KB per slice of
// 128 x 128 x 128), against the cooperative 128 x 256 stage (48 KB per slice of twice the work).
#include <cstdio>
#include <vector>
#include <algorithm>
#include <string>
#include <cstdlib>

#include "kittens.cuh"

using namespace kittens;

constexpr int BK = 128;
using a_tile = st_fp8e4m3<64, BK>;
using b_tile = st_fp8e4m3<256, BK>;
using bh_tile = st_fp8e4m3<128, BK>;
using a_gl = gl<fp8e4m3, 1, 1, -1, -1, a_tile>;
using b_gl = gl<fp8e4m3, 1, 1, -1, -1, b_tile, bh_tile>;

struct globals {
    a_gl a;
    b_gl b;
    int iters;
    long long* cycles;       // per CTA: the consumers' loop
    long long* fill_cycles;  // per CTA: the producer's loop, fills landed
    float* sink;
    int parts;  // fill tiles loaded per slice: bit 0 A tile 0, bit 1 A tile 1, bit 2 B (7: the GEMM's stage)
};

constexpr int RING = 3;
// CONS consumer warpgroups (3: a 192 x 256 tile's mainloop; its ring stage holds three A tiles and B,
// 56 KB, and it has 3 fixed A tiles instead of 4 to fit in shared memory). At 512 threads (128
// registers at launch) ptxas (nvcc 13.0) refuses an m64n256k32, "Insufficient registers (128) to
// compile instruction", although the consumers raise their limit to 160 first: mode 1 only.
template <int CONS>
constexpr int fixed_a() { return CONS == 3 ? 3 : 4; }
// A tiles per ring stage: one per consumer; a lone consumer (CONS = 1) fills a 128-row tile.
template <int CONS>
constexpr int fill_a() { return CONS == 1 ? 2 : CONS; }
template <int CONS>
constexpr int smem_bytes() {
    return fixed_a<CONS>() * sizeof(a_tile) + sizeof(b_tile) + RING * (fill_a<CONS>() * sizeof(a_tile) + sizeof(b_tile)) + 1024;
}

template <int MODE, int FILL, int CONS = 2, int DEPTH = 1>
__global__ __launch_bounds__((CONS + 1) * 128, 1) void micro(const __grid_constant__ globals g) {
    static_assert(CONS == 2 || (CONS == 3 && MODE == 1) || (CONS == 1 && FILL != 1),
                  "three consumers: mode 1 only; one consumer: no uncoupled fills");
    static_assert(DEPTH == 1 || DEPTH == 2, "one or two K slices in flight");
    extern __shared__ alignment_dummy smem[];
    tma_swizzle_allocator al((int*)&smem[0]);
    constexpr int NA = fixed_a<CONS>();
    a_tile(&a_s)[NA] = al.allocate<a_tile, NA>();
    b_tile& b_s = al.allocate<b_tile>();
    a_tile(&fa)[RING][fill_a<CONS>()] = al.allocate<a_tile, RING, fill_a<CONS>()>();
    b_tile(&fb)[RING] = al.allocate<b_tile, RING>();
    __shared__ semaphore filled[RING], freed[RING], operands;
    __shared__ volatile int progress;  // slices issued by consumer 0
    const int wg = __shfl_sync(0xffffffffu, (int)threadIdx.x / 128, 0);
    if (threadIdx.x == 0) {
        for (int i = 0; i < RING; i++) {
            init_semaphore(filled[i], 0, 1);
            init_semaphore(freed[i], CONS * 4, 0);  // one arrival per consumer warp
        }
        init_semaphore(operands, 0, 1);
        // The fixed tiles the wgmmas read, from the operand (random e4m3 unless CONSTANT).
        tma::expect_bytes(operands, NA * sizeof(a_tile) + sizeof(b_tile));
        for (int i = 0; i < NA; i++) {
            tma::load_async(a_s[i], g.a, {(int)(blockIdx.x * 4 + i) % (g.a.rows() / 64), 0}, operands);
        }
        tma::load_async(b_s, g.b, {(int)blockIdx.x % (g.b.rows() / 256), 1}, operands);
        progress = 0;
    }
    __syncthreads();
    if (wg == CONS) {
        warpgroup::decrease_registers<CONS == 3 ? 24 : 40>();
        if (FILL && warpgroup::laneid() == 0) {
            const int rows_a = g.a.rows() / 64, rows_b = g.b.rows() / 256, cols = g.a.cols() / BK;
            const long long p0 = clock64();
            for (int i = 0; i < g.iters; i++) {
                const int s = FILL == 1 ? i % 2 : i % RING;
                if (FILL == 1) {
                    if (i >= 2) wait(filled[s], ((i - 2) / 2) & 1);  // the stage's last fill landed
                    while (progress < i - 1) {}                       // at most one slice ahead
                } else {
                    wait(freed[s], ((i / RING) & 1) ^ 1);  // fresh barrier: passes at once
                }
                // L2-resident like the GEMM's panels: 8 B tiles x 16 K slices (4 MB), A in 2 MB.
                const int r = (blockIdx.x * 7 + i) % min(rows_b, 8), c = (blockIdx.x + i) % min(cols, 16);
                if constexpr (CONS == 1) {  // a 128 x 128 tile's stage: two A tiles, half of B
                    tma::expect_bytes(filled[s], 2 * sizeof(a_tile) + sizeof(bh_tile));
                    for (int j = 0; j < 2; j++) tma::load_async(fa[s][j], g.a, {(2 * r + j) % rows_a, c}, filled[s]);
                    tma::load_async(reinterpret_cast<bh_tile&>(fb[s]), g.b, {2 * r, c}, filled[s]);  // r < rows_b
                } else if constexpr (CONS == 3) {  // the whole stage: three A tiles and B
                    tma::expect_bytes(filled[s], 3 * sizeof(a_tile) + sizeof(b_tile));
                    for (int j = 0; j < 3; j++) tma::load_async(fa[s][j], g.a, {(3 * r + j) % rows_a, c}, filled[s]);
                    tma::load_async(fb[s], g.b, {r, c}, filled[s]);
                } else {
                    tma::expect_bytes(filled[s], ((g.parts & 1) + (g.parts >> 1 & 1)) * sizeof(a_tile) +
                                                     (g.parts >> 2 & 1) * sizeof(b_tile));
                    if (g.parts & 1) tma::load_async(fa[s][0], g.a, {(2 * r) % rows_a, c}, filled[s]);
                    if (g.parts & 2) tma::load_async(fa[s][1], g.a, {(2 * r + 1) % rows_a, c}, filled[s]);
                    if (g.parts & 4) tma::load_async(fb[s], g.b, {r, c}, filled[s]);
                }
            }
            if (FILL == 1) {
                for (int i = max(g.iters - 2, 0); i < g.iters; i++) wait(filled[i % 2], (i / 2) & 1);
            } else {
                for (int i = max(g.iters - RING, 0); i < g.iters; i++) wait(freed[i % RING], (i / RING) & 1);
            }
            g.fill_cycles[blockIdx.x] = clock64() - p0;
        }
        return;
    }
    warpgroup::increase_registers<CONS == 3 ? 160 : 232>();
    wait(operands, 0);
    auto& bh = reinterpret_cast<bh_tile(&)[2]>(b_s);
    long long t0 = 0;
    float keep = 0.f;
    if constexpr (MODE == 0) {
        rt_fl<16, 256> acc;
        warpgroup::mm_ABt(acc, a_s[wg], b_s);
        warpgroup::mma_async_wait<0>();
        t0 = clock64();
        for (int i = 0; i < g.iters; i++) {
            if (FILL == 2) {
                wait(filled[i % RING], (i / RING) & 1);
                warp::arrive(freed[i % RING]);
            }
            warpgroup::mma_ABt(acc, a_s[wg], b_s);
            warpgroup::mma_async_wait<DEPTH>();
            if (wg == 0 && threadIdx.x == 0) progress = i;
        }
        warpgroup::mma_async_wait<0>();
        keep = acc.tiles[0][0].data[0].x;
    } else {
        rt_fl<16, 128> x, y;
        warpgroup::mm_ABt(x, a_s[MODE == 1 ? wg : 2 * wg], MODE == 1 ? bh[0] : bh[0]);
        warpgroup::mm_ABt(y, a_s[MODE == 1 ? wg : 2 * wg + 1], MODE == 1 ? bh[1] : bh[0]);
        warpgroup::mma_async_wait<0>();
        t0 = clock64();
        for (int i = 0; i < g.iters; i++) {
            if (FILL == 2) {
                wait(filled[i % RING], (i / RING) & 1);
                warp::arrive(freed[i % RING]);
            }
            if constexpr (MODE == 1) {
                warpgroup::mma_ABt(x, a_s[wg], bh[0]);
                warpgroup::mma_ABt(y, a_s[wg], bh[1]);
            } else {
                warpgroup::mma_ABt(x, a_s[2 * wg], bh[0]);
                warpgroup::mma_ABt(y, a_s[2 * wg + 1], bh[0]);
            }
            warpgroup::mma_async_wait<2 * DEPTH>();
            if (wg == 0 && threadIdx.x == 0) progress = i;
        }
        warpgroup::mma_async_wait<0>();
        keep = x.tiles[0][0].data[0].x + y.tiles[0][0].data[0].x;
    }
    const long long t1 = clock64();
    if (threadIdx.x == 0) g.cycles[blockIdx.x] = t1 - t0;
    if (keep == 1234.5f) g.sink[threadIdx.x] = keep;  // never true; keeps the results live
    if (wg == 0 && threadIdx.x == 0) progress = g.iters;
}

__global__ void fill_random(uint32_t* p, size_t n) {
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t x = (uint32_t)i * 2654435761u + 12345u;
        x ^= x >> 15; x *= 2246822519u; x ^= x >> 13; x *= 3266489917u; x ^= x >> 16;
        uint32_t y = 0;
        for (int b = 0; b < 4; b++) {
            uint32_t v = (x >> (8 * b)) & 0xffu;
            if ((v & 0x7fu) == 0x7fu) v -= 1;  // no NaN
            y |= v << (8 * b);
        }
        p[i] = y;
    }
}

template <int MODE, int FILL, int CONS = 2, int DEPTH = 1>
void run(const globals& g0, int sms, int iters, const char* name) {
    globals g = g0;
    g.iters = iters;
    auto k = micro<MODE, FILL, CONS, DEPTH>;
    constexpr int SMEM = smem_bytes<CONS>();
    cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, SMEM);
    cudaEvent_t e0, e1;
    cudaEventCreate(&e0);
    cudaEventCreate(&e1);
    std::vector<float> ms;
    std::vector<double> per_clk, pace;
    for (int rep = 0; rep < 6; rep++) {
        cudaEventRecord(e0);
        k<<<sms, (CONS + 1) * 128, SMEM>>>(g);
        cudaEventRecord(e1);
        cudaEventSynchronize(e1);
        float t;
        cudaEventElapsedTime(&t, e0, e1);
        std::vector<long long> cyc(sms);
        cudaMemcpy(cyc.data(), g.cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
        std::sort(cyc.begin(), cyc.end());
        const double flops_cta = 2.0 * CONS * 64 * 256 * BK * iters;  // CONS warpgroups x 2 x 64 x 256 x 128 per slice
        std::vector<long long> fcyc(sms);
        cudaMemcpy(fcyc.data(), g.fill_cycles, sms * sizeof(long long), cudaMemcpyDeviceToHost);
        std::sort(fcyc.begin(), fcyc.end());
        if (rep >= 1) {
            ms.push_back(t);
            per_clk.push_back(flops_cta / cyc[sms / 2]);
            pace.push_back((double)fcyc[sms / 2] / cyc[sms / 2]);
        }
    }
    std::sort(ms.begin(), ms.end());
    std::sort(per_clk.begin(), per_clk.end());
    std::sort(pace.begin(), pace.end());
    const double tflops = 2.0 * CONS * 64 * 256 * BK * (double)iters * sms / (ms[ms.size() / 2] * 1e-3) / 1e12;
    const double fpc = per_clk[per_clk.size() / 2];
    std::string fill = FILL == 0 ? "none" : FILL == 1 ? "uncoupled" : "coupled, 3 stages";
    if (CONS == 3) fill += FILL ? ", three consumers (192 x 256), 56 KB per slice" : ", three consumers (192 x 256)";
    else if (CONS == 1) fill += FILL ? ", one consumer, 32 KB per slice" : ", one consumer";
    else if (FILL && g.parts != 7) {  // a partial stage (FILL_SWEEP): name its bytes
        const int kb = ((g.parts & 1) + (g.parts >> 1 & 1)) * 8 + (g.parts >> 2 & 1) * 32;
        fill += ", " + std::to_string(kb) + " KB per slice";
    }
    if (DEPTH == 2) fill += ", two slices in flight";
    printf("| %s | %s | %.0f | %.1f%% | %.0f | %.2f | %s |\n", name, fill.c_str(), fpc, 100.0 * fpc / 8192,
           tflops, tflops * 1e12 / (fpc * sms) / 1e9, FILL ? std::to_string(pace[pace.size() / 2]).substr(0, 4).c_str() : "");
    cudaError_t err = cudaGetLastError();
    if (err != cudaSuccess) printf("error %s\n", cudaGetErrorString(err));
}

int main() {
    int sms = 0;
    cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
    const size_t rows = 16384, cols = 16384;  // 256 MB operand for the fills
    void* buf;
    cudaMalloc(&buf, rows * cols);
    // Random e4m3 bits (NaN codes 0x7f / 0xff replaced), or with CONSTANT=1 all 1.0 (0x38): the
    // tensor cores' power, and so the clock under the cap, depends on how many bits toggle.
    const char* constant = getenv("CONSTANT");
    if (constant != nullptr && constant[0] == '1') cudaMemset(buf, 0x38, rows * cols);
    else fill_random<<<4096, 256>>>(reinterpret_cast<uint32_t*>(buf), rows * cols / 4);
    printf("operands: %s\n", constant != nullptr && constant[0] == '1' ? "constant e4m3 1.0" : "random e4m3");
    long long *cycles, *fill_cycles;
    float* sink;
    cudaMalloc(&cycles, sms * sizeof(long long));
    cudaMalloc(&fill_cycles, sms * sizeof(long long));
    cudaMemset(fill_cycles, 0, sms * sizeof(long long));
    cudaMalloc(&sink, 1024 * sizeof(float));
    auto* p = reinterpret_cast<fp8e4m3*>(buf);
    globals g{a_gl{p, nullptr, nullptr, rows, cols}, b_gl{p, nullptr, nullptr, rows, cols}, 0, cycles, fill_cycles, sink, 7};
    const int iters = 20000;  // ~10 ms per launch
    printf("| wgmmas per warpgroup and k32 step | TMA fills | FLOP per SM clock | of 8192 | TFLOP/s | implied SM clock (GHz) | fill / wgmma cycles |\n");
    printf("|---|---|---|---|---|---|---|\n");
    // ONE_WG: can one warpgroup keep the tensor cores busy alone? A ping-pong kernel's mainloop has
    // one consumer issuing at a time (docs/benchmarks.md 5a's ping-pong reached 80% tensor-pipe
    // activity, cuBLAS's 96%). Per-CTA work per slice halves with one consumer; the FLOP per clock
    // column counts it.
    const char* one_wg = getenv("ONE_WG");
    const char one = one_wg != nullptr ? one_wg[0] : '0';
    if (one == '2') {  // coupled fills, launches of the same length (one consumer: half the work per slice)
        for (int round = 0; round < 3; round++) {
            run<0, 2>(g, sms, 10 * iters, "one m64n256k32");
            run<2, 2>(g, sms, 10 * iters, "two m64n128k32, same B");
            run<2, 2, 1>(g, sms, 20 * iters, "two m64n128k32, same B");
            run<0, 2, 1>(g, sms, 20 * iters, "one m64n256k32");
        }
        return 0;
    }
    if (one == '1') {  // no fills, one or two slices in flight
        for (int round = 0; round < 2; round++) {
            run<0, 0>(g, sms, iters, "one m64n256k32");
            run<2, 0>(g, sms, iters, "two m64n128k32, same B");
            run<0, 0, 1>(g, sms, iters, "one m64n256k32");
            run<2, 0, 1>(g, sms, iters, "two m64n128k32, same B");
            run<0, 0, 1, 2>(g, sms, iters, "one m64n256k32");
            run<2, 0, 1, 2>(g, sms, iters, "two m64n128k32, same B");
            run<2, 0, 2, 2>(g, sms, iters, "two m64n128k32, same B");
        }
        return 0;
    }
    const char* sweep = getenv("FILL_SWEEP");
    if (sweep != nullptr && sweep[0] == '1') {
        // How the clock under the power cap depends on the fill bytes per slice: the GEMM's
        // mainloop (mode 0) with 0, 16, 32, 40 and 48 KB of fills, 200,000-slice launches, rounds
        // interleaved (docs/benchmarks.md 5k).
        for (int round = 0; round < 3; round++) {
            run<0, 0>(g, sms, 10 * iters, "one m64n256k32");
            for (int parts : {3, 4, 5, 7}) {
                g.parts = parts;
                run<0, 1>(g, sms, 10 * iters, "one m64n256k32");
            }
            for (int parts : {4, 7}) {
                g.parts = parts;
                run<0, 2>(g, sms, 10 * iters, "one m64n256k32");
            }
            g.parts = 7;
            run<1, 2>(g, sms, 10 * iters, "two m64n128k32, same A");
            run<1, 0, 3>(g, sms, 10 * iters, "two m64n128k32, same A");
            run<1, 2, 3>(g, sms, 10 * iters, "two m64n128k32, same A");
        }
        return 0;
    }
    for (int round = 0; round < 2; round++) {
        run<0, 0>(g, sms, iters, "one m64n256k32");
        run<1, 0>(g, sms, iters, "two m64n128k32, same A");
        run<2, 0>(g, sms, iters, "two m64n128k32, same B");
        run<0, 1>(g, sms, iters, "one m64n256k32");
        run<1, 1>(g, sms, iters, "two m64n128k32, same A");
        run<2, 1>(g, sms, iters, "two m64n128k32, same B");
        run<0, 2>(g, sms, iters, "one m64n256k32");
        run<1, 2>(g, sms, iters, "two m64n128k32, same A");
        run<2, 2>(g, sms, iters, "two m64n128k32, same B");
    }
    return 0;
}
