// Small host/device helpers shared by titankit's ThunderKittens kernels (sm_90a only).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "kittens.cuh"

namespace titankit_tk {
namespace detail {

// One-line errors for users: the Python side shows them as RuntimeError.
inline void check_cuda(cudaError_t err, const char* what) {
    if (err != cudaSuccess) {
        throw std::runtime_error(std::string("titankit thunderkittens: ") + what + ": " +
                                 cudaGetErrorString(err));
    }
}

inline void require(bool ok, const std::string& msg) {
    if (!ok) throw std::runtime_error("titankit thunderkittens: " + msg);
}

// Multiprocessor count of the current device (a cheap attribute query, no synchronisation).
inline int num_sms() {
    int dev = 0, sms = 0;
    check_cuda(cudaGetDevice(&dev), "cudaGetDevice");
    check_cuda(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev), "SM count");
    return sms;
}

// Raise a kernel's dynamic shared-memory limit. Not a stream operation, so it is legal while a
// CUDA graph is being captured; cheap enough to repeat on every launch (the driver caches it).
template <typename Kernel>
inline void set_smem(Kernel kernel, int bytes) {
    check_cuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, bytes),
               "cudaFuncSetAttribute(max dynamic shared memory)");
}

// The calling thread's warpgroup (threadIdx.x / 128), broadcast from lane 0 so that nvcc can prove
// it equal across the warp. Values derived from it (role branches, loop bounds, ring slots) then
// count as warp-uniform, and the compiler keeps shared-memory addresses and wgmma descriptors on the
// uniform datapath; from threadIdx.x / 128 it rebuilt both descriptors in vector registers before
// every wgmma (docs/benchmarks.md 4e: the attention forward 7% faster at the ANCHORS shape).
__device__ __forceinline__ int warpgroup_index() {
    return __shfl_sync(0xffffffffu, static_cast<int>(threadIdx.x) / 128, 0);
}

// An empty asm that "reads and writes" every register of a tile: a scheduling barrier for them.
// Constraints match the wgmma operands' ("f" for fp32 pairs, "r" for packed bf16), so no moves.
template <typename RT>
__device__ inline void pin_registers(RT& t) {
#pragma unroll
    for (int i = 0; i < RT::height; i++)
#pragma unroll
        for (int j = 0; j < RT::width; j++)
#pragma unroll
            for (int k = 0; k < RT::packed_per_tile; k++) {
                if constexpr (std::is_same_v<typename RT::T, float>) {
                    asm volatile("" : "+f"(t.tiles[i][j].data[k].x), "+f"(t.tiles[i][j].data[k].y));
                } else {
                    asm volatile("" : "+r"(*reinterpret_cast<uint32_t*>(&t.tiles[i][j].data[k])));
                }
            }
}

// TK's mma_fence without its fence.proxy.async: pin the accumulator's registers, then wgmma.fence.
// For wgmmas whose shared operands arrive by TMA (async proxy, ordered by the mbarrier) or were
// written by ordinary stores that already fenced (fence_async_shared below, at every such store):
// TK's per-call proxy fence (MEMBAR.ALL.CTA + FENCE.VIEW.ASYNC) then only makes the warp wait for
// its memory operations still in flight (docs/benchmarks.md 4o). Pass such a wgmma's template
// argument fence = 0 after calling this.
template <typename RT>
__device__ inline void wgmma_fence(RT& d) {
    pin_registers(d);
    asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory");
}

// Dynamic shared memory carved into 1024-byte aligned tiles (swizzled TMA and wgmma need that):
// the base is aligned once, and every tile sits at a compile-time offset from it. TK's
// tma_swizzle_allocator aligns its 64-bit pointer again at each allocation (a modulo, a 64-bit add
// and a select, each depending on the last). nvcc cannot fold those chains and recomputes them in
// the kernels' loops, before the wgmmas that address a ring stage. The tiles land at the same
// addresses as with TK's allocator. Used by the attention forward (0.5-1.3% faster). The backward
// and the FP8 GEMM keep TK's allocator: with this one in the backward too, forward+backward ran
// 2-3% slower (cause not found; the backward's SASS is 8% shorter), and the GEMM ran the same
// (docs/benchmarks.md 4r).
class smem_allocator {
    template <typename A, size_t... dims>
    struct array {
        using type = A;
    };
    template <typename A, size_t first, size_t... rest>
    struct array<A, first, rest...> {
        using type = typename array<A, rest...>::type[first];
    };
    char* base_;
    uint32_t offset_ = 0;

  public:
    __device__ explicit smem_allocator(void* smem)
        : base_(reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem) + 1023) &
                                        ~static_cast<uintptr_t>(1023))) {}
    // A (or an array A[d0][d1]...) at the next 1024-byte boundary.
    template <typename A, size_t... dims>
    __device__ inline typename array<A, dims...>::type& allocate() {
        using T = typename array<A, dims...>::type;
        offset_ = (offset_ + 1023u) & ~1023u;
        T* p = reinterpret_cast<T*>(base_ + offset_);
        offset_ += static_cast<uint32_t>(sizeof(T));
        return *p;
    }
};

// Shared memory written by ordinary stores (st.shared, stmatrix) and read next by the async proxy
// (a TMA store, wgmma): per the PTX memory model each writing thread fences before the barrier.
__device__ __forceinline__ void fence_async_shared() {
    asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory");
}

}  // namespace detail
}  // namespace titankit_tk
