"""The TK attention backward's small kernels, three builds side by side: `new` (prep reads each row
in 128-byte pieces and zeroes the fp32 dQ accumulator as it goes; the dQ conversion issues its
four loads before its shared stores), `new, memset` (the same with the accumulator zeroed by a
memset as before) and `head` (the backward as it was, from the file given). Per build: the
per-kernel profile of the anchor step (kernel_times.py of 2026-12-04_h200_recheck_fp8_training);
then alloc_ab's forward and forward+backward do_bench rounds, builds rotated.

  git show 5f1419f:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
  python3 docs/perf/2026-12-04_h200_tk_bwd_small_kernels/probe.py /tmp/head_bwd.cu [rounds] [cooldown]
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
FUSED = "    float4* zero = locks == nullptr ? reinterpret_cast<float4*>(dq_acc) : nullptr;\n"
SEPARATE = ("    float4* zero = nullptr;\n"
            "    if (locks == nullptr)\n"
            "        cudaMemsetAsync(dq_acc, 0, dq_blocks * C::DQ_BLOCK * sizeof(float), stream);\n")


def memset_edit(file_name, text):
    if file_name == BWD:
        assert text.count(FUSED) == 1
        text = text.replace(FUSED, SEPARATE)
    return text


def main():
    head = Path(sys.argv[1]).read_text()
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 1.0
    exts = {"new": build.extension()}
    t0 = time.time()
    exts["head"] = edited_extension("titankit_tk_head", lambda f, t: head if f == BWD else t)
    exts["new, memset"] = edited_extension("titankit_tk_memset", memset_edit)
    print(f"two more builds {time.time() - t0:.0f} s", flush=True)
    kernel_times.profile_each(exts)
    print(flush=True)
    attention_ab(exts, rounds, cooldown)


if __name__ == "__main__":
    main()
