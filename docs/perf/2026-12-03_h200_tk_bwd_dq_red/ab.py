"""The backward's non-deterministic dQ adds as vector reductions (red.global.add.v4.f32, eight per
thread) straight from registers, against main's staging tile, proxy fence, warpgroup barriers and
one bulk reduce-add per block. The working tree holds the new dq_add; REVERT restores main's (the
comments elsewhere do not change the build). Same checks and timing as the shared-loads A/B, whose
script this imports:

  python3 docs/perf/2026-12-03_h200_tk_bwd_dq_red/ab.py [rounds] [cooldown]
"""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "2026-12-03_h200_tk_bwd_shared_loads"))
import ab as shared_loads_ab  # noqa: E402

TREE = '    auto dq_add = [&](int it, int2 tile, const dq_rt& dq) {\n        const auto [h, qt] = tile;\n        const int t = warpgroup::laneid();  // 0..127\n        warp::arrive(ds_free[it % 2]);\n        if constexpr (!DET) {\n            float* const blk = g.dq_acc + dq_block<D>(b, h, qt, part, g.hq, n_qt) + 4 * t;\n#pragma unroll\n            for (int m = 0; m < C::DQ_BLOCK / 512; m++) {\n                const float4 v = dq_float4(dq, m);\n                asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};\\n" ::"l"(blk + 512 * m),\n                             "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)\n                             : "memory");\n            }\n        } else {\n            const uint32_t stage = static_cast<uint32_t>(__cvta_generic_to_shared(&dq_s[wg]));\n            if (it > 0) wait(dq_read[wg], (it - 1) & 1);  // staging block free\n#pragma unroll\n            for (int m = 0; m < C::DQ_BLOCK / 512; m++) {\n                const float4 v = dq_float4(dq, m);\n                asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\\n" ::"r"(\n                                 stage + 16 * (m * 128 + t)),\n                             "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)\n                             : "memory");\n            }\n            detail::fence_async_shared();\n            __syncwarp();  // the whole warp\'s stores and fences before lane 0\'s (release) arrival\n            warp::arrive(dq_staged[wg]);\n        }\n    };\n'
MAIN = '    auto dq_add = [&](int it, int2 tile, const dq_rt& dq) {\n        const auto [h, qt] = tile;\n        const int t = warpgroup::laneid();  // 0..127\n        warp::arrive(ds_free[it % 2]);\n        const uint32_t stage = static_cast<uint32_t>(__cvta_generic_to_shared(&dq_s[wg]));\n        if constexpr (DET) {\n            if (it > 0) wait(dq_read[wg], (it - 1) & 1);  // staging block free\n        } else {\n            if (t == 0) tma::store_async_read_wait<0>();  // staging block free\n            warpgroup::sync(wg + 1);\n        }\n#pragma unroll\n        for (int m = 0; m < C::DQ_BLOCK / 512; m++) {\n            const float4 v = dq_float4(dq, m);\n            asm volatile("st.shared.v4.f32 [%0], {%1, %2, %3, %4};\\n" ::"r"(\n                             stage + 16 * (m * 128 + t)),\n                         "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)\n                         : "memory");\n        }\n        detail::fence_async_shared();\n        if constexpr (DET) {\n            __syncwarp();  // the whole warp\'s stores and fences before lane 0\'s (release) arrival\n            warp::arrive(dq_staged[wg]);\n        } else {\n            warpgroup::sync(wg + 1);\n            if (t == 0) bulk_add<D>(g.dq_acc + dq_block<D>(b, h, qt, part, g.hq, n_qt), stage);\n        }\n    };\n'
REVERT = [("attention_bwd_sm90.cu", TREE, MAIN)]

if __name__ == "__main__":
    shared_loads_ab.main(REVERT)
