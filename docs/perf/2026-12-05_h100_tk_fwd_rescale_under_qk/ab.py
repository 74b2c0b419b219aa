"""The forward with O's rescale deferred to just after the next S_i = Q K_i^T issue (FlashAttention-3's
order; the working tree, "under S, branch") against the forward as it was (the file given, "head"),
and a third build that multiplies O by corr on every iteration, without the warp's any() test
("under S, always"). alloc_ab's checks (forward output and LSE bitwise against head, dK, dV bitwise,
dQ's largest difference) for both variants, then forward and forward+backward do_bench rounds, builds
alternating, `cooldown` s idle before each measurement.

  git show <base>:kernels/thunderkittens/attention_fwd_sm90.cu > /tmp/head_fwd.cu
  python3 docs/perf/2026-12-05_h100_tk_fwd_rescale_under_qk/ab.py /tmp/head_fwd.cu [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

from kernels.thunderkittens import build

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
from alloc_ab import attention_ab, edited_extension  # noqa: E402

FWD = "attention_fwd_sm90.cu"
BRANCH = "if (__shfl_sync(0xffffffffu, (int)rescale_pending, 0)) warp::mul_row(o, o, corr);"


def always(file_name, text):
    if file_name == FWD:
        assert text.count(BRANCH) == 1
        text = text.replace(BRANCH, "warp::mul_row(o, o, corr);")
    return text


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    t0 = time.time()
    exts = {"under S, branch": build.extension()}
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == FWD else t)
    exts["under S, always"] = edited_extension("titankit_tk_always", always)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    # alloc_ab checks its first build against its second: "always" against head here (one quick
    # round), the branch build against head in the three-build run.
    attention_ab({"under S, always": exts["under S, always"], "head": exts["head"]}, 1, 0)
    attention_ab(exts, rounds, cooldown)
    build._EXTENSION = exts["under S, branch"]


if __name__ == "__main__":
    main()
