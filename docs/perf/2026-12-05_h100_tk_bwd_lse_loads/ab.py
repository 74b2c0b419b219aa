"""The backward with lse2 / delta read from shared memory before S^T / dP^T are issued ("loads
first", the working tree) against the backward as it was ("head", the file given: read right after
the issue, while those wgmmas read their operands), and a third build that reads them after the
wgmmas retired ("loads after the wait"). alloc_ab's checks against head (forward output and LSE, dK,
dV bitwise, dQ's largest difference), then forward and forward+backward do_bench rounds, builds
alternating, `cooldown` s idle before each measurement.

  git show <base>:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
  python3 docs/perf/2026-12-05_h100_tk_bwd_lse_loads/ab.py /tmp/head_bwd.cu [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

from kernels.thunderkittens import build

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
from alloc_ab import attention_ab, edited_extension  # noqa: E402

BWD = "attention_bwd_sm90.cu"
LOADS = """            load_cols(lse2, DET ? lse_s[s] : *(s ? lse_p1 : lse_p0));
            load_cols(delta, DET ? delta_s[s] : *(s ? delta_p1 : delta_p0));
"""
WAIT = "            warpgroup::mma_async_wait();\n\n            // P^T = exp2("


def after_wait(file_name, text):
    if file_name == BWD:
        assert text.count(LOADS) == 1 and text.count(WAIT) == 1
        text = text.replace(LOADS, "").replace(WAIT, "            warpgroup::mma_async_wait();\n" + LOADS
                                              + "\n            // P^T = exp2(")
    return text


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    t0 = time.time()
    exts = {"loads first": build.extension()}
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == BWD else t)
    exts["loads after the wait"] = edited_extension("titankit_tk_after", after_wait)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    # alloc_ab checks its first build against its second: "after the wait" against head here (one
    # quick round), "loads first" against head in the three-build run.
    attention_ab({"loads after the wait": exts["loads after the wait"], "head": exts["head"]}, 1, 0)
    attention_ab(exts, rounds, cooldown)
    build._EXTENSION = exts["loads first"]


if __name__ == "__main__":
    main()
