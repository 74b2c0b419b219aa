"""Attention forward+backward under the GPU's power limit: back-to-back passes (no L2 flush) for
WIN seconds per window, NVML power and SM clock sampled every 10 ms in a thread; TK and cuDNN
interleaved by round. Also a burst figure: 10 passes after 2 s idle.
Usage: python3 attn_power.py [rounds] [win_s] [hq:hkv:s,...] [impl,...]
impl: tk, cudnn, tk:N = TK with TK_BWD_ABLATE=N (only with ablate_probe.patch applied), or
tk-legacy = TK with TK_BWD_LEGACY=1 (only with ab_legacy.patch applied)."""
import os
import ctypes
import sys
import threading
import time

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import cudnn_attention as cudnn

nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
h = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0


def power_w():
    p = ctypes.c_uint()
    nv.nvmlDeviceGetPowerUsage(h, ctypes.byref(p))
    return p.value / 1000


def sm_mhz():
    c = ctypes.c_uint()
    nv.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(c))  # NVML_CLOCK_SM
    return c.value


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    win = float(sys.argv[2]) if len(sys.argv) > 2 else 3.0
    shapes = sys.argv[3] if len(sys.argv) > 3 else "64:8:8192,32:8:8192"
    names = (sys.argv[4] if len(sys.argv) > 4 else "tk,cudnn").split(",")

    def impl(name):
        if name == "cudnn":
            return lambda q, k, v: cudnn(q, k, v, causal=True)

        def tk(q, k, v):
            os.environ["TK_BWD_ABLATE"] = name.partition(":")[2] or "0"
            os.environ["TK_BWD_LEGACY"] = "1" if name == "tk-legacy" else "0"
            return ops.attention(q, k, v, causal=True)
        return tk

    impls = {n: impl(n) for n in names}
    print("| Hq:Hkv:S | round | impl | burst TFLOP/s | sustained TFLOP/s | mean W | mean SM MHz | TFLOP/s per GHz |")
    print("|---|---|---|---|---|---|---|---|")
    for shape in shapes.split(","):
        hq, hkv, s = (int(x) for x in shape.split(":"))
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, hh, 128, device="cuda", generator=g).bfloat16()
                       for hh in (hq, hkv, hkv, hq))
        flops = 3.5 * 4.0 * hq * s * s * 128 / 2
        for r in range(rounds):
            for name in list(impls)[r % len(impls):] + list(impls)[:r % len(impls)]:
                fn = impls[name]
                leaves = [t.detach().requires_grad_() for t in (q, k, v)]
                step = lambda: torch.autograd.grad(fn(*leaves), leaves, do)
                step()
                torch.cuda.synchronize()
                time.sleep(2.0)
                a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
                a.record()
                for _ in range(10):
                    step()
                b.record()
                torch.cuda.synchronize()
                burst = 10 * flops / (a.elapsed_time(b) / 1e3) / 1e12
                n = 0
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < 1.0:  # reach the power limit first
                    step()
                    torch.cuda.synchronize()
                samples, stop = [], threading.Event()

                def sample():
                    while not stop.is_set():
                        samples.append((power_w(), sm_mhz()))
                        time.sleep(0.01)

                th = threading.Thread(target=sample)
                th.start()
                t0 = time.perf_counter()
                while time.perf_counter() - t0 < win:
                    for _ in range(10):
                        step()
                    torch.cuda.synchronize()
                    n += 10
                dt = time.perf_counter() - t0
                stop.set()
                th.join()
                w = sum(p for p, _ in samples) / len(samples)
                mhz = sum(c for _, c in samples) / len(samples)
                tf = n * flops / dt / 1e12
                print(f"| {shape} | {r} | {name} | {burst:.0f} | {tf:.0f} | {w:.0f} | {mhz:.0f} | {tf / mhz * 1000:.0f} |",
                      flush=True)
        del q, k, v, do
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main()
