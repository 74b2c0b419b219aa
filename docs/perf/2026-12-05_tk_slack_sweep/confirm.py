"""Slack 2 (the working tree after the sweep) against slack 8 (main before it) and slack 0: more
rounds of alloc_ab's forward and forward+backward timing at the anchor and 8B shapes.

    python3 docs/perf/2026-12-05_tk_slack_sweep/confirm.py [rounds] [cooldown]
"""
import sys
from pathlib import Path

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF.parents[1]))
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
from alloc_ab import attention_ab, edited_extension  # noqa: E402

from kernels.thunderkittens import bench as B  # noqa: E402
from kernels.thunderkittens import build  # noqa: E402

SLACK2 = "constexpr float RESCALE_SLACK = 2.f;"


def slack_build(slack: int):
    def edit(file_name, text):
        if file_name == "attention_fwd_sm90.cu":
            assert text.count(SLACK2) == 1, "the forward no longer holds RESCALE_SLACK = 2"
            text = text.replace(SLACK2, SLACK2.replace("2.f", f"{slack}.f"))
        return text
    return edited_extension(f"titankit_tk_slack{slack}", edit)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    exts = {"slack 2": build.extension(), "slack 8": slack_build(8), "slack 0": slack_build(0)}
    attention_ab(exts, rounds, cooldown, {n: B.ATTN_SHAPES[n] for n in ("anchor", "8b")})


if __name__ == "__main__":
    main()
