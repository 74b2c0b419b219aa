"""The TK forward's RESCALE_SLACK at 0, 2, 4 and 8 (main's): speed and accuracy side by side, to
choose between 4zi's forward gain and cuDNN's per-call accuracy (docs/benchmarks.md 4zk, 4zl).

    python3 docs/perf/2026-12-05_tk_slack_sweep/sweep.py [rounds] [cooldown]

Part 1, speed: alloc_ab.attention_ab's forward and forward+backward rounds of the four builds at the
anchor and 8B shapes (builds in alternating order, `cooldown` s idle before each measurement).
Part 2, accuracy: session 50's accuracy.case at B 1, S 4096, 16/2 heads, q and k scaled by 1, 2, 3:
each build's out/dq/dk/dv error against the fp32 reference, and as a multiple of cuDNN's. The CPU
emulation (4zl) predicts, at scale 2, out 1.00 / 1.02 / 1.05 / 1.11 / 1.21 of cuDNN's for slack
0 / 1 / 2 / 4 / 8.
"""
import sys
from pathlib import Path

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF.parents[1]))
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(PERF / "2026-12-05_h200_session50"))
import accuracy  # noqa: E402
from alloc_ab import attention_ab, edited_extension  # noqa: E402

from kernels.thunderkittens import bench as B  # noqa: E402
from kernels.thunderkittens import build  # noqa: E402

FWD = "attention_fwd_sm90.cu"
SLACK8 = "constexpr float RESCALE_SLACK = 8.f;"


def slack_build(slack: int):
    def edit(file_name, text):
        if file_name == FWD:
            assert text.count(SLACK8) == 1, "main's forward no longer holds RESCALE_SLACK = 8"
            text = text.replace(SLACK8, SLACK8.replace("8.f", f"{slack}.f"))
        return text
    return edited_extension(f"titankit_tk_slack{slack}", edit)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    exts = {"slack 8 (main)": build.extension()}
    for slack in (0, 2, 4):
        exts[f"slack {slack}"] = slack_build(slack)
    # Checks column: each build against slack 0 (the first shown is main's, so "vs slack 0").
    order = {"slack 8 (main)": exts["slack 8 (main)"], "slack 0": exts["slack 0"],
             "slack 2": exts["slack 2"], "slack 4": exts["slack 4"]}
    attention_ab(order, rounds, cooldown, {n: B.ATTN_SHAPES[n] for n in ("anchor", "8b")})
    print()
    tk = accuracy.IMPLS["thunderkittens"]
    accuracy.IMPLS = {"sdpa cudnn": accuracy.sdpa("cudnn"),
                      **{f"tk {n}": accuracy.with_extension(e, tk) for n, e in order.items()}}
    print("| q, k scale | implementation | out | dq | dk | dv | out, dq, dk, dv / cuDNN's |")
    print("|---|---|---|---|---|---|---|")
    for scale in (1.0, 2.0, 3.0):
        rows, _ = accuracy.case(1, 4096, 16, 2, scale, seed=4096 + 16 + int(10 * scale))
        base = rows["sdpa cudnn"]
        for name, errs in rows.items():
            print(f"| {scale:g} | {name} | " + " | ".join(f"{e:.2e}" for e in errs) + " | "
                  + ", ".join(f"{e / c:.2f}" for e, c in zip(errs, base)) + " |", flush=True)
    build._EXTENSION = exts["slack 8 (main)"]


if __name__ == "__main__":
    main()
