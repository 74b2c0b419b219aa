"""The backward with consumer 1's dead diagonal tile skipped (the working tree) against the backward
as it was (the file given): alloc_ab's checks and forward / forward+backward rounds, builds
alternating, then each build's per-kernel profile of the anchor step.

  git show <base>:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
  python3 docs/perf/2026-12-05_h200_tk_bwd_dead_half/ab.py /tmp/head_bwd.cu [rounds] [cooldown]
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
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    exts = {"dead half skipped": build.extension()}
    t0 = time.time()
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == BWD else t)
    print(f"head build {time.time() - t0:.0f} s", flush=True)
    attention_ab(exts, rounds, cooldown)
    kernel_times.profile_each(exts)
    build._EXTENSION = exts["dead half skipped"]


if __name__ == "__main__":
    main()
