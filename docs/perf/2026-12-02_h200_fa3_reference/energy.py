"""Energy per FLOP of causal attention forward+backward under the H200's 700 W limit: TK, FA3 and
cuDNN interleaved in one process. Each window runs one implementation's forward+backward back to
back for WIN seconds (after 1 s of the same as warm-up); NVML's total-energy counter is read before
and after, and a thread samples the SM clock every 10 ms.

  python3 docs/perf/2026-12-02_h200_fa3_reference/energy.py [shape] [rounds] [win_s]
"""
import ctypes
import os
import sys
import threading
import time

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa3_bench  # noqa: E402
import fa3_build  # noqa: E402
from kernels.thunderkittens import bench as B  # noqa: E402
from kernels.thunderkittens import ops  # noqa: E402

nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
handle = ctypes.c_void_p()
assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(handle)) == 0


def energy_mj() -> int:
    e = ctypes.c_ulonglong()
    assert nv.nvmlDeviceGetTotalEnergyConsumption(handle, ctypes.byref(e)) == 0
    return e.value


def sm_mhz() -> int:
    c = ctypes.c_uint()
    nv.nvmlDeviceGetClockInfo(handle, 1, ctypes.byref(c))  # NVML_CLOCK_SM
    return c.value


def window(step, seconds: float) -> tuple[int, float, float, float]:
    """(calls, elapsed s, joules, mean SM MHz) of `step` run back to back for about `seconds`."""
    t = time.perf_counter()
    step()
    torch.cuda.synchronize()
    n = max(5, int(seconds / max(time.perf_counter() - t, 1e-4)))
    clocks, stop = [], threading.Event()

    def sample():
        while not stop.is_set():
            clocks.append(sm_mhz())
            time.sleep(0.01)

    th = threading.Thread(target=sample)
    th.start()
    e0, t0 = energy_mj(), time.perf_counter()
    for _ in range(n):
        step()
    torch.cuda.synchronize()
    e1, t1 = energy_mj(), time.perf_counter()
    stop.set()
    th.join()
    return n, t1 - t0, (e1 - e0) / 1000, sum(clocks) / max(1, len(clocks))


def main() -> None:
    name = sys.argv[1] if len(sys.argv) > 1 else "anchor"
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 2
    win = float(sys.argv[3]) if len(sys.argv) > 3 else 4.0
    fa3_build.load(os.environ.get("FA3_ROOT", ".fa3"), verbose=False)
    b, hq, hkv, s, d = B.ATTN_SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    flops = 3.5 * 4.0 * b * hq * s * s * d / 2
    impls = {"thunderkittens": lambda q, k, v: ops.attention(q, k, v, causal=True),
             "flash-attention 3": fa3_bench.fa3, "sdpa cudnn": B.cudnn_attention}
    print(f"# {name}: forward+backward back to back, {win} s windows")
    print("| impl | round | TFLOP/s | mJ per TFLOP | mean W | mean SM MHz | TFLOP/s per GHz |")
    print("|---|---|---|---|---|---|---|")
    for r in range(rounds):
        for impl in B.round_orders(list(impls), rounds)[r]:
            fn = impls[impl]
            step = lambda fn=fn: torch.autograd.grad(fn(*leaves), leaves, do)  # noqa: E731
            window(step, 1.0)  # warm: the board at its power limit, clocks settled
            n, dt, joules, mhz = window(step, win)
            tf = n * flops / dt / 1e12
            print(f"| {impl} | {r} | {tf:.0f} | {joules / (n * flops / 1e12) * 1000:.1f} | "
                  f"{joules / dt:.0f} | {mhz:.0f} | {tf / mhz * 1000:.0f} |", flush=True)


if __name__ == "__main__":
    main()
