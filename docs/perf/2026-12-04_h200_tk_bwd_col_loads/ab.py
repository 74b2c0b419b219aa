"""The TK backward's lse2 / delta column loads, three builds side by side: `il` (the working tree:
the prep kernel stores each query tile's lse2 and delta in col_slot order, so a consumer lane
reads its 16 columns of each with four 16-byte loads instead of eight 8-byte ones), `il, early`
(the same, the loads issued before the S^T / dP^T wgmmas instead of after) and `head` (the
backward as it was, from the file given). alloc_ab's forward and forward+backward do_bench rounds,
builds rotated; then each build's per-kernel profile of the anchor step.

  git apply docs/perf/2026-12-04_h200_tk_bwd_col_loads/col_loads.patch
  git show 398bfd7:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
  python3 docs/perf/2026-12-04_h200_tk_bwd_col_loads/ab.py /tmp/head_bwd.cu [rounds] [cooldown]
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
LOADS = ("            typename rt_fl<16, BWD_Q>::row_vec lse2, delta;  // per query (column)\n"
         "            load_cols(lse2, DET ? lse_s[s] : *(s ? lse_p1 : lse_p0));\n"
         "            load_cols(delta, DET ? delta_s[s] : *(s ? delta_p1 : delta_p0));\n")
ISSUE = ("            rt_fl<16, BWD_Q> st, dpt;  // S^T and dP^T: this warp's 16 keys x 64 queries\n")


def early_edit(file_name, text):
    if file_name == BWD:
        assert text.count(LOADS) == 1 and text.count(ISSUE) == 1
        text = text.replace(LOADS, "").replace(ISSUE, LOADS + ISSUE)
    return text


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    exts = {"il": build.extension()}
    t0 = time.time()
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == BWD else t)
    exts["il, early"] = edited_extension("titankit_tk_early", early_edit)
    print(f"two more builds {time.time() - t0:.0f} s", flush=True)
    attention_ab(exts, rounds, cooldown)
    kernel_times.profile_each(exts)
    build._EXTENSION = exts["il"]


if __name__ == "__main__":
    main()
