"""The TK forward's rescale of O skipped while a warp's running maxima stay put: three builds side
by side. `slack 8` (the working tree: a row's maximum moves only once the scores pass it by more
than 2^8; else corr = 1 and, when all of a warp's rows keep theirs, the warp skips the rescale),
`slack 0` (the same code with RESCALE_SLACK = 0: a maximum moves whenever it grows, as in head; the
rescale is skipped only when no row's maximum grew. Written expecting head's bits; call 1 found
them different, see docs/benchmarks.md 4zi) and `head` (the forward as it was, from the file
given). alloc_ab's forward and forward+backward rounds, builds
rotated (its checks: slack 0 against head), then slack 8's largest output and LSE differences
from head, then each build's per-kernel profile of the anchor step.

  git apply docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/rescale_skip.patch
  git show 461e9f7:kernels/thunderkittens/attention_fwd_sm90.cu > /tmp/head_fwd.cu
  python3 docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/ab.py /tmp/head_fwd.cu [rounds] [cooldown]
"""
import sys
from pathlib import Path

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build

PERF = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(PERF / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(PERF / "2026-12-04_h200_recheck_fp8_training"))
import kernel_times  # noqa: E402
from alloc_ab import attention_ab, edited_extension  # noqa: E402

FWD = "attention_fwd_sm90.cu"
SLACK8 = "constexpr float RESCALE_SLACK = 8.f;"


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0

    def slack0(file_name, text):
        if file_name == FWD:
            assert text.count(SLACK8) == 1
            text = text.replace(SLACK8, SLACK8.replace("8.f", "0.f"))
        return text

    exts = {"slack 0": edited_extension("titankit_tk_slack0", slack0),
            "head": edited_extension("titankit_tk_head", lambda f, t: head if f == FWD else t),
            "slack 8": build.extension()}
    attention_ab(exts, rounds, cooldown)
    print("\n| shape | slack 8 vs head: out max abs diff | lse max abs diff | out max abs |")
    print("|---|---|---|---|")
    for shape in ("anchor", "8b", "70b-tp8"):
        b, hq, hkv, s, d = B.ATTN_SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv))
        res = {}
        for n in ("slack 8", "head"):
            build._EXTENSION = exts[n]
            res[n] = torch.ops.titankit.tk_attn_fwd(q, k, v, True)
        (o8, l8), (oh, lh) = res["slack 8"], res["head"]
        print(f"| {shape} | {(o8.float() - oh.float()).abs().max().item():.2e} | "
              f"{(l8 - lh).abs().max().item():.2e} | {oh.float().abs().max().item():.2f} |", flush=True)
    kernel_times.profile_each(exts)
    build._EXTENSION = exts["slack 8"]


if __name__ == "__main__":
    main()
