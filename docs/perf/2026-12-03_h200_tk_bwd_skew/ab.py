"""The backward with consumer 1 starting each unit once consumer 0 has its first dS^T ("tree": the
consumers skewed by about half an iteration, so one's wgmmas can run while the other computes P^T
and dS^T) against main without the skew ("head"), and the skew with 4v's third Q / dO stage
("skew3", three_stages_on_skew.patch: with two stages the producer can refill a stage only once the
later consumer freed it, which limits how far the consumers can drift apart), all built in one
process (4s's A/B; the checks compare tree with head). Shapes: the bench's three and
the 8B layout at batch 4 (4x).

  git apply docs/perf/2026-12-03_h200_tk_bwd_skew/skew.patch
  python3 docs/perf/2026-12-03_h200_tk_bwd_skew/ab.py [rounds] [cooldown]
"""
import os
import shutil
import subprocess
import sys
import tempfile

from kernels.thunderkittens import bench as B

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "2026-12-03_h200_tk_bwd_shared_loads"))
import ab as shared_loads_ab  # noqa: E402

SKEW_WAIT = ("        if (skew && wg == 1) asm volatile(\"bar.sync %0, %1;\\n\" ::\"n\"(BAR_SKEW), "
             "\"n\"(BWD_CONSUMERS * 128));\n")
SKEW_ARRIVE = ("            if (wg == 0 && ui == 0) asm volatile(\"bar.arrive %0, %1;\\n\" ::\"n\"(BAR_SKEW), "
               "\"n\"(BWD_CONSUMERS * 128));\n")
REVERT = [("attention_bwd_sm90.cu", SKEW_WAIT, ""), ("attention_bwd_sm90.cu", SKEW_ARRIVE, "")]

# 4x's shapes without Hkv 32 (time).
SHAPES = {**{n: B.ATTN_SHAPES[n] for n in ("anchor", "8b", "70b-tp8")}, "8b-b4": (4, 32, 8, 8192, 128)}


def three_stages(file_name, text):
    """The tree's source with three_stages_on_skew.patch applied (by patch(1), on a temporary copy)."""
    if file_name != "attention_bwd_sm90.cu":
        return text
    with tempfile.TemporaryDirectory() as tmp:
        f = os.path.join(tmp, file_name)
        with open(f, "w") as out:
            out.write(text)
        subprocess.run(["patch", "-s", f, os.path.join(HERE, "three_stages_on_skew.patch")], check=True)
        with open(f) as src:
            return src.read()


if __name__ == "__main__":
    if shutil.which("patch"):
        shared_loads_ab.main(REVERT, SHAPES, [("skew3", three_stages)])
    else:
        print("no patch(1) on this machine: skew3 not built", flush=True)
        shared_loads_ab.main(REVERT, SHAPES)
