"""The default causal backward with its CTAs taking the key-block pairs fastest in launch order
("tree") against main's order, KV heads fastest ("head"), both built in one process (4s's A/B).
Shapes: the bench's three, and two with more CTAs than two waves: the 8B layout at batch 4 (1,024
CTAs) and Hkv 32 (Hq 256, 1,024 CTAs; benchmarks 4w).

  python3 docs/perf/2026-12-03_h200_tk_bwd_pair_order/ab.py [rounds] [cooldown]
"""
import os
import sys

from kernels.thunderkittens import bench as B

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "2026-12-03_h200_tk_bwd_shared_loads"))
import ab as shared_loads_ab  # noqa: E402

TREE = ("                   : paired ? pairs_fastest()\n"
        "                            : make_int3(blockIdx.x, blockIdx.y, blockIdx.z);")
MAIN = "                   : make_int3(blockIdx.x, blockIdx.y, blockIdx.z);"
REVERT = [("attention_bwd_sm90.cu", TREE, MAIN)]

SHAPES = {**{n: B.ATTN_SHAPES[n] for n in ("anchor", "8b", "70b-tp8")},
          "8b-b4": (4, 32, 8, 8192, 128), "hkv32": (1, 256, 32, 8192, 128)}

if __name__ == "__main__":
    shared_loads_ab.main(REVERT, SHAPES)
