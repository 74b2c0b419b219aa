// Pieces shared by the attention forward and backward kernels (sm_90a, ThunderKittens tiles).
//
// Global layout: the project's attention contract keeps q, k, v, out as (B, S, H, D) contiguous.
// A TK gl<bf16, B, S, H, D> with a TMA descriptor on axis 1 ("depth" = S) makes each tile of R rows
// x D columns a strided box (row stride H * D) of one head, so TMA reads and writes the (B, S, H, D)
// tensors directly: no transposes in the wrapper. TMA zero-fills rows past S on loads and clips them
// on stores, so sequence lengths need not be multiples of the tile height.
#pragma once

#include "tk_common.cuh"

namespace titankit_tk {
namespace attn {

using namespace kittens;

constexpr float LOG2E = 1.4426950408889634f;
constexpr float LN2 = 0.6931471805599453f;
constexpr float NEG_INF = -__builtin_huge_valf();

// Tile of R sequence rows x D head dims, and the (B, S, H, D) layout with a TMA descriptor for it
// along the sequence axis.
template <int R, int D>
using seq_tile = st_bf<R, D>;
template <typename... Tiles>
using bshd_gl = gl<bf16, -1, -1, -1, -1, tma::descriptor<Tiles, dim::DEPTH>...>;

template <typename GL>
inline GL make_bshd(const void* ptr, int b, int s, int h, int d) {
    return GL{reinterpret_cast<bf16*>(const_cast<void*>(ptr)), (size_t)b, (size_t)s, (size_t)h,
              (size_t)d};
}

// Coordinates (in tiles) of sequence tile `t` of head `h`, batch `b` in a bshd_gl.
template <typename TILE>
__device__ inline coord<TILE> seq_coord(int b, int t, int h) {
    return coord<TILE>(b, t, h, 0);
}

template <typename TILE, typename GL>
__device__ inline void load_seq_tile(TILE& dst, const GL& src, int b, int t, int h, semaphore& bar) {
    tma::load_async<dim::DEPTH, cache_policy::NORMAL>(dst, src, seq_coord<TILE>(b, t, h), bar);
}

template <typename TILE, typename GL>
__device__ inline void store_seq_tile(const GL& dst, const TILE& src, int b, int t, int h) {
    tma::store_async<dim::DEPTH, cache_policy::NORMAL>(dst, src, seq_coord<TILE>(b, t, h));
}

// Register-tile element coordinates (TK's row layout = the wgmma accumulator fragment): in a 16 x 16
// subtile, packed pair data[k] of lane l sits at row (k % 2) * 8 + l / 4 and columns
// (k / 2) * 8 + 2 * (l % 4) + {0, 1}.
__device__ inline int frag_row(int k) { return (k % 2) * 8 + laneid() / 4; }
__device__ inline int frag_col(int k) { return (k / 2) * 8 + 2 * (laneid() % 4); }

}  // namespace attn
}  // namespace titankit_tk
