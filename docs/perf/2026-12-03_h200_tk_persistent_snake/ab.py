"""A/B of forward changes against main, in one process (4r's attention A/B, 4zd's checks).
  persist   one CTA per SM walking the tiles heaviest first in snake order; K and V freed apart;
            the next tile's Q loaded once both consumers hold this one's in registers; out and lse
            stored from registers (persistent_snake.patch)
  persist2  the same with the pipeline running on across tiles: a tile's last P V issued with the
            next tile's first Q K^T, retiring during its first softmax (persistent_pipelined.patch)
  kvsplit   (call 1 only) main's one-CTA-per-tile forward with only the K and V free barriers
            split, so that a K slot is refilled once its Q K^T retired (kv_free_split.patch)
In call 1 the tree held persistent_snake.patch, in call 2 persistent_pipelined.patch; main is the
tree with that patch undone. Call 2 adds a shape with shorter sequences (tile boundaries every 2,048
keys instead of 8,192).

  python3 docs/perf/2026-12-03_h200_tk_persistent_snake/ab.py [rounds] [cooldown]
"""
import importlib.util
import sys
import time
from pathlib import Path

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build

HERE = Path(__file__).resolve().parent
PERF = HERE.parent
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
import alloc_ab  # noqa: E402  (edited_extension, attention_ab)


def load(name, path):
    spec = importlib.util.spec_from_file_location(name, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


fused_ab = load("fused_ab", PERF / "2026-12-03_h200_tk_bwd_fused_dq" / "ab.py")  # patched()
desc_ab = load("desc_ab", PERF / "2026-12-03_h200_tk_fwd_desc" / "ab.py")        # check()


TREE_PATCH = HERE / "persistent_pipelined.patch"  # call 1: persistent_snake.patch


def main_src(name, text):
    return fused_ab.patched(name, text, True, TREE_PATCH)


def persist(name, text):
    return fused_ab.patched(name, main_src(name, text), False, HERE / "persistent_snake.patch")


def kvsplit(name, text):
    return fused_ab.patched(name, main_src(name, text), False, HERE / "kv_free_split.patch")


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"main": alloc_ab.edited_extension("titankit_tk_main", main_src),
            "persist": alloc_ab.edited_extension("titankit_tk_persist", persist),
            "persist2": build.extension()}
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    desc_ab.check(exts)
    shapes = {n: B.ATTN_SHAPES[n] for n in ("anchor", "8b", "70b-tp8")}
    shapes["8b S 2048 x 4"] = (4, 32, 8, 2048, 128)
    alloc_ab.attention_ab(exts, rounds, cooldown, shapes)
