"""What the H200 reaches on plain memory passes of 4zg's sizes, timed by the bench's own timer
(kernels.thunderkittens.bench._time: do_bench's median, L2 flushed): the read-only reduction over
268 MB that the prep kernel's reads amount to, a 268 MB fp32 -> 134 MB bf16 conversion (the dQ
conversion's bytes) and a 268 MB zero fill (the memset). (Call 6 ran it with do_bench's mean.)

  python3 docs/perf/2026-12-04_h200_tk_bwd_small_kernels/bandwidth.py
"""
import torch

from kernels.thunderkittens import bench as B


def main():
    n = 64 * 8192 * 128  # (Hq, S, D) of the anchor
    dout = torch.randn(n, device="cuda").bfloat16()
    out = torch.randn(n, device="cuda").bfloat16()
    both = torch.cat([dout, out])
    acc = torch.empty(n, device="cuda")
    acc.normal_()
    dq = torch.empty(n, device="cuda", dtype=torch.bfloat16)
    rows = [
        ("sum of one 268 MB bf16 tensor (read)", lambda: both.sum(), 2 * n * 2),
        ("rowwise dot of dO and O, (Hq S, D) -> fp32 (read 268 MB)",
         lambda: torch.linalg.vecdot(dout.view(-1, 128), out.view(-1, 128)), 2 * n * 2),
        ("fp32 -> bf16 copy, 268 MB read, 134 MB written", lambda: dq.copy_(acc), n * 6),
        ("zero_ of a 268 MB fp32 tensor (write; last, as it zeroes acc)", lambda: acc.zero_(), n * 4),
    ]
    print("| pass | us | TB/s |")
    print("|---|---|---|")
    for name, fn, nbytes in rows:
        ms = B._time(fn)
        print(f"| {name} | {ms * 1e3:.1f} | {nbytes / ms / 1e9:.2f} |")


if __name__ == "__main__":
    main()
