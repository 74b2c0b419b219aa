"""Where the bench's time goes between kernels: the TK attention (and cuDNN's, for comparison)
forward and forward+backward at one shape, timed four ways in one process:
  do_bench   the bench's method (triton.testing.do_bench median: L2 flushed before each call,
             CUDA events around each call)
  b2b        CUDA events around 20 calls back to back, no flush, divided by 20
  timeline   torch.profiler over 10 calls, with and without the flush before each: the GPU span
             from the first kernel of a call to its last, the kernels' own time, and the idle gaps
             between consecutive GPU operations (summed by the pair of operations around them)
  host       host time per call while the GPU is kept busy by a sleep kernel (is the host ahead?)

  python3 docs/perf/2026-12-04_h200_recheck_fp8_training/timing_methods.py [shape]
"""
import sys
import time
from collections import defaultdict

import torch
from torch.autograd import DeviceType
from torch.profiler import ProfilerActivity, profile

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import ops


def short(name):
    name = name.split("(")[0].replace("void ", "").replace("titankit_tk::attn::", "")
    return name if len(name) < 60 else name[:57] + "..."


def host_us(fn, n=20):
    torch.cuda.synchronize()
    torch.cuda._sleep(int(4e9))  # about 2 s of GPU work ahead of the calls
    t = time.perf_counter()
    for _ in range(n):
        fn()
    dt = (time.perf_counter() - t) / n
    torch.cuda.synchronize()
    return dt * 1e6


def b2b_us(fn, n=20):
    for _ in range(3):
        fn()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    s.record()
    for _ in range(n):
        fn()
    e.record()
    torch.cuda.synchronize()
    return s.elapsed_time(e) * 1e3 / n


def timeline(fn, flush, n=10):
    """(GPU time per call from its first operation to its last, kernel time per call, gaps by pair)."""
    cache = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")  # do_bench's flush buffer
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CPU, ProfilerActivity.CUDA]) as prof:
        for _ in range(n):
            if flush:
                cache.zero_()
            fn()
        torch.cuda.synchronize()
    dev = sorted((e for e in prof.events() if e.device_type == DeviceType.CUDA),
                 key=lambda e: e.time_range.start)
    busy = sum(e.time_range.end - e.time_range.start for e in dev if "FillFunctor<int>" not in e.name)
    gaps = defaultdict(float)
    for a, b in zip(dev, dev[1:]):
        gaps[(short(a.name), short(b.name))] += max(0.0, b.time_range.start - a.time_range.end)
    span = dev[-1].time_range.end - dev[0].time_range.start
    return span / n, busy / n, {k: v / n for k, v in gaps.items()}


def main():
    shape = sys.argv[1] if len(sys.argv) > 1 else "anchor"
    b, hq, hkv, s, d = B.ATTN_SHAPES[shape]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    impls = {
        "tk": (lambda: torch.ops.titankit.tk_attn_fwd(q, k, v, True),
               lambda: torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)),
        "cudnn": (lambda: B.cudnn_attention(q, k, v),
                  lambda: torch.autograd.grad(B.cudnn_attention(*leaves), leaves, do)),
    }
    fwd_flops = 4.0 * b * hq * s * s * d / 2
    print(f"{shape}: B {b}, Hq {hq}, Hkv {hkv}, S {s}, D {d}; us per call (TFLOP/s)")
    print("| impl | pass | do_bench | b2b | span, no flush | kernels, no flush | span after flush | host |")
    print("|---|---|---|---|---|---|---|---|")
    detail = []
    for name, (fwd, both) in impls.items():
        for pname, fn, flops in (("fwd", fwd, fwd_flops), ("fwd+bwd", both, 3.5 * fwd_flops)):
            tf = lambda us: f"{us:.0f} ({flops / us / 1e6:.0f})"
            db = B._time(fn) * 1e3
            bb = b2b_us(fn)
            span, busy, gaps = timeline(fn, False)
            fspan, fbusy, fgaps = timeline(fn, True)
            hu = host_us(fn)
            print(f"| {name} | {pname} | {tf(db)} | {tf(bb)} | {tf(span)} | {tf(busy)} | {fspan:.0f} | {hu:.0f} |", flush=True)
            for label, gp in (("no flush", gaps), ("flush", fgaps)):
                top = sorted(gp.items(), key=lambda kv: -kv[1])[:6]
                detail.append(f"{name} {pname} gaps ({label}), us per call: "
                              + "; ".join(f"{a} -> {b_}: {v:.1f}" for (a, b_), v in top))
    print()
    print("\n".join(detail))


if __name__ == "__main__":
    main()
