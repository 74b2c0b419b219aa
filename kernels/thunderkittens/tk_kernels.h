// Host API of titankit's ThunderKittens kernels (sm_90a). Plain C++: no torch, no TK types, so the
// torch binding (binding.cpp) compiles with the host compiler and each .cu file compiles on its own.
//
// Every function only enqueues work on `stream`: no host synchronisation, no allocation, so the
// calls can be captured in CUDA graphs. Pointers are device pointers; errors (bad shapes, TMA
// descriptor failures, launch errors) throw std::runtime_error with a one-line message.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace titankit_tk {

// C (M, N) bf16 = (A (M, K) e4m3 row-major @ B (N, K)^T e4m3 row-major) * scale_a[m] * scale_b[n].
// scale_a (M,) and scale_b (N,) fp32; with `tensorwise`, one element each (scale_a[0], scale_b[0]).
// Needs K % 128 == 0 and N % 64 == 0 (whole 128-byte TMA swizzle chunks); any M (the tail is
// zero-filled on loads and clipped on the store).
// When a small partial wave would follow the last full one, the kernel splits the K loop of its
// last tiles over all SMs (stream-K) and needs a workspace, sized by fp8_gemm_rowwise_workspace
// for the same shape on the same device: `partials` fp32 (uninitialised is fine) and `flags`
// int32, which must be zero at launch (zero them on `stream` just before, e.g. one memset). Both
// sizes 0: plain data-parallel, null pointers are fine.
// fp8_gemm_rowwise_plan: the launch for a shape on the current device, `grid` CTAs (one per SM at
// most) and the tiles at the end of the tile order whose K loops stream-K splits (0: none).
struct Fp8GemmPlan {
    int grid;
    int sk_tiles;
};
Fp8GemmPlan fp8_gemm_rowwise_plan(int m, int n, int k);
struct Fp8GemmWorkspace {
    int64_t partials;  // fp32 elements
    int64_t flags;     // int32 elements
};
Fp8GemmWorkspace fp8_gemm_rowwise_workspace(int m, int n, int k);
void fp8_gemm_rowwise(const void* a, const void* b, const float* scale_a, const float* scale_b,
                      bool tensorwise, void* c, int m, int n, int k, float* partials, int* flags,
                      cudaStream_t stream);

// Attention forward. q (B, Sq, Hq, D), k and v (B, Skv, Hkv, D) contiguous bf16; o like q;
// lse (B, Hq, Sq) fp32 natural log. D == 128 or 64. causal needs Sq == Skv.
void attn_fwd(const void* q, const void* k, const void* v, void* o, float* lse, int b, int sq,
              int skv, int hq, int hkv, int d, bool causal, cudaStream_t stream);

// Rounded-up query length of the backward's per-row buffers (delta, lse * log2(e)).
int attn_bwd_padded_len(int sq);

// Attention backward (FlashAttention-2 formulas, Dao 2023). dout, q, out (B, Sq, Hq, D) bf16;
// k, v (B, Skv, Hkv, D) bf16; lse (B, Hq, Sq) fp32 (may be the global lse of a larger attention).
// How many CTAs the backward puts on one (KV head, key block) for this shape and device; when > 1
// it needs the dkv_acc workspace below.
int attn_bwd_kv_split(int b, int hq, int hkv, int skv);

// Size of the `locks` workspace of the deterministic backward, in ints.
long attn_bwd_lock_count(int b, int sq, int hq);

// dlse (B, Hq, Sq) fp32 or null: a gradient flowing into lse (delta becomes rowsum(dO*O) - dlse).
// Workspace (uninitialised is fine, this call fills it): delta and lse2 (B, Hq, attn_bwd_padded_len
// (Sq)) fp32, dq_acc (B, Hq, attn_bwd_padded_len(Sq), D) fp32 (the kernel's own block order),
// dkv_acc (2, S * B, Skv, Hkv, D) fp32 when attn_bwd_kv_split(...) > 1 (else may be null), and
// locks (attn_bwd_lock_count(...) ints) for bitwise-reproducible gradients, or null for the faster
// backward whose fp32 adds land in varying order; S = attn_bwd_kv_split(...) with locks, else 1.
// Outputs dq like q, dk and dv like k, all bf16.
void attn_bwd(const void* dout, const void* q, const void* k, const void* v, const void* out,
              const float* lse, const float* dlse, float* delta, float* lse2, float* dq_acc,
              float* dkv_acc, int* locks, void* dq, void* dk, void* dv, int b, int sq, int skv,
              int hq, int hkv, int d, bool causal, cudaStream_t stream);

}  // namespace titankit_tk
