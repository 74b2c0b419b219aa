"""Per-kernel GPU time of the ThunderKittens attention forward+backward (torch.profiler), beside
the do_bench time of the same call: how much of the step lies outside the forward and backward
main kernels (memsets, delta / lse2 prep, dQ and dK/dV conversions, gaps between launches).

  python3 docs/perf/2026-12-04_h200_recheck_fp8_training/kernel_times.py [shapes] [iterations]
"""
import sys

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import ops


def device_us(evt):
    # torch >= 2.4 names it device time; older releases cuda time.
    return getattr(evt, "self_device_time_total", None) or getattr(evt, "self_cuda_time_total", 0.0)


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    shapes = argv[0].split(",") if len(argv) > 0 else ["anchor"]
    iters = int(argv[1]) if len(argv) > 1 else 20
    for name in shapes:
        b, hq, hkv, s, d = B.ATTN_SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]

        def step():
            return torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)

        fwd_flops = 4.0 * b * hq * s * s * d / 2
        ms = B._time(step)
        for _ in range(3):
            step()
        torch.cuda.synchronize()
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            for _ in range(iters):
                step()
            torch.cuda.synchronize()
        rows = [(e.key, e.count, device_us(e)) for e in prof.key_averages()
                if e.device_type == DeviceType.CUDA and device_us(e) > 0]
        rows.sort(key=lambda r: -r[2])
        total = sum(r[2] for r in rows) / iters
        print(f"\n{name} (B {b}, Hq {hq}, Hkv {hkv}, S {s}, D {d}): do_bench median {ms * 1e3:.0f} us "
              f"per forward+backward ({3.5 * fwd_flops / ms / 1e9:.0f} TFLOP/s); kernels and memsets "
              f"{total:.0f} us per call ({iters} calls profiled)")
        print("| kernel | launches per call | us per call | share of do_bench time | TFLOP/s if it were alone |")
        print("|---|---|---|---|---|")
        for key, count, us in rows:
            per = us / iters
            kname = key if len(key) < 90 else key[:87] + "..."
            flops = fwd_flops if "fwd_kernel" in key else 2.5 * fwd_flops if "bwd_kernel" in key else 0
            tf = f"{flops / per / 1e6:.0f}" if flops else ""
            print(f"| `{kname}` | {count / iters:g} | {per:.1f} | {per / (ms * 1e3):.1%} | {tf} |")
        print(f"| (not in a kernel: launch gaps) | | {ms * 1e3 - total:.1f} | {1 - total / (ms * 1e3):.1%} | |")


def profile_each(exts, shape="anchor", iters=20):
    """main's profile of `shape` under each build (name -> extension, A/B scripts' edited builds) in
    turn, each under a `### name` heading; leaves the last build installed."""
    from kernels.thunderkittens import build

    for name, ext in exts.items():
        build._EXTENSION = ext
        print(f"\n### {name}", flush=True)
        main([shape, str(iters)])


if __name__ == "__main__":
    main()
