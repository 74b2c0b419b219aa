"""The backward with dV += P^T dO issued as soon as P^T is in bf16 ("dV early", the working tree with
dv_early.patch) against the backward as it was ("head", the file given), then each build's
per-kernel profile of the anchor step. alloc_ab's checks (forward output and LSE, dK and dV bitwise
against head, dQ's largest difference), forward and forward+backward do_bench rounds, builds
alternating, `cooldown` s idle before each measurement.

  git show <base>:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
  python3 docs/perf/2026-12-05_tk_bwd_dv_early/ab.py /tmp/head_bwd.cu [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

from kernels.thunderkittens import build

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(PERF / "2026-12-04_h200_recheck_fp8_training"))
import kernel_times  # noqa: E402
from alloc_ab import attention_ab, edited_extension  # noqa: E402

BWD = "attention_bwd_sm90.cu"


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 4
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    t0 = time.time()
    exts = {"dV early": build.extension()}
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == BWD else t)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    attention_ab(exts, rounds, cooldown)
    kernel_times.profile_each(exts)
    build._EXTENSION = exts["dV early"]


if __name__ == "__main__":
    main()
