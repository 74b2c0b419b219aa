"""Where a forward+backward's time goes, kernel by kernel: do_bench's loop (256 MB L2 flush, then
the pass) under torch.profiler, TK and cuDNN at one shape. Per-iteration CUDA time of every kernel,
their sum, and the event-timed iteration (the difference is GPU idle time between kernels).
Usage: python3 prof.py HQ HKV S"""
import sys

import torch
from torch.profiler import ProfilerActivity, profile

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import cudnn_attention as cudnn

hq, hkv, s = (int(x) for x in sys.argv[1:4])
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
flush = torch.empty(256 * 2**20, dtype=torch.int8, device="cuda")
N = 10
for name, fn in (("tk", lambda q, k, v: ops.attention(q, k, v, causal=True)),
                 ("cudnn", lambda q, k, v: cudnn(q, k, v, causal=True))):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    for _ in range(5):
        torch.autograd.grad(fn(*leaves), leaves, do)
    torch.cuda.synchronize()
    ev = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(N)]
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for a, b in ev:
            flush.zero_()
            a.record()
            torch.autograd.grad(fn(*leaves), leaves, do)
            b.record()
        torch.cuda.synchronize()
    it = sorted(a.elapsed_time(b) for a, b in ev)[N // 2]
    rows = [(e.key, e.device_time_total / N / 1e3, e.count // N) for e in prof.key_averages()
            if e.device_time_total > 0]
    rows.sort(key=lambda r: -r[1])
    flops = 3.5 * 4.0 * hq * s * s * 128 / 2
    print(f"\n== {name} {hq}:{hkv}:{s}: event-timed iteration (median) {it:.3f} ms = {flops / it / 1e9:.0f} TFLOP/s")
    tot = 0.0
    for key, ms, c in rows:
        print(f"  {ms:8.3f} ms x{c:<3} {key[:110]}")
        tot += ms
    print(f"  sum of kernels {tot:.3f} ms (includes the 256 MB flush)")
