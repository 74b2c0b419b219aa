"""Energy and throughput of FP8 GEMM variants under the GPU's power limit, interleaved in one
process. Each window: N back-to-back calls (no L2 flush) for ~WIN s; NVML total energy (mJ)
before/after, mean SM clock from NVML samples in a thread.
usage: python3 session/gemm_energy.py SHAPES ROUNDS VARIANTS [WIN_S]  (comma lists)
variant: a TITANKIT_TK_GEMM_VARIANT value of the patched kernel (or 'cublas'), optional ':S' = TITANKIT_TK_GEMM_SUPER."""
import ctypes, os, sys, threading, time, torch
from kernels.fp8 import reference as R
from kernels.thunderkittens import ops
nv = ctypes.CDLL("libnvidia-ml.so.1")
assert nv.nvmlInit_v2() == 0
h = ctypes.c_void_p(); assert nv.nvmlDeviceGetHandleByIndex_v2(0, ctypes.byref(h)) == 0
def energy_mj():
    e = ctypes.c_ulonglong(); assert nv.nvmlDeviceGetTotalEnergyConsumption(h, ctypes.byref(e)) == 0; return e.value
def sm_clock():
    c = ctypes.c_uint(); nv.nvmlDeviceGetClockInfo(h, 1, ctypes.byref(c)); return c.value  # NVML_CLOCK_SM
shapes = {"8192^3": (8192, 8192, 8192), "8B w1/w3": (8192, 14336, 4096),
          "70B w2": (8192, 8192, 28672), "70B w1": (8192, 28672, 8192), "4096^3": (4096, 4096, 4096)}
names = sys.argv[1].split(",")
rounds = int(sys.argv[2])
variants = sys.argv[3].split(",")
win = float(sys.argv[4]) if len(sys.argv) > 4 else 1.0
print("| shape | impl | round | TFLOP/s | J per GEMM | mean W | mean SM MHz | TFLOP/s per GHz |")
for name in names:
    m, n, k = shapes[name]
    flops = 2.0 * m * n * k
    g = torch.Generator(device="cuda").manual_seed(0)
    x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
    w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
    qx, sx = R.quantize_rowwise(x); qw, sw = R.quantize_rowwise(w); sw = sw.reshape(1, -1)
    os.environ["TITANKIT_TK_GEMM_VARIANT"] = "head"; os.environ.pop("TITANKIT_TK_GEMM_SUPER", None)
    ref = ops.fp8_gemm_rowwise(qx, qw, sx, sw).float()
    for r in range(rounds):
        for v in variants:
            if v == "cublas":
                fn = lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
            else:
                c, _, sup = v.partition(":")
                os.environ["TITANKIT_TK_GEMM_VARIANT"] = c
                if sup: os.environ["TITANKIT_TK_GEMM_SUPER"] = sup
                else: os.environ.pop("TITANKIT_TK_GEMM_SUPER", None)
                fn = lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw)
            d = (fn().float() - ref).abs().max().item()
            assert d < 0.5, (name, v, d)
            for _ in range(20): fn()
            torch.cuda.synchronize()
            t = time.perf_counter(); fn(); torch.cuda.synchronize(); est = time.perf_counter() - t
            n_calls = max(20, int(win / max(est, 1e-4)))
            clocks, stop = [], threading.Event()
            def sample():
                while not stop.is_set(): clocks.append(sm_clock()); time.sleep(0.01)
            th = threading.Thread(target=sample); th.start()
            e0, t0 = energy_mj(), time.perf_counter()
            for _ in range(n_calls): fn()
            torch.cuda.synchronize()
            e1, t1 = energy_mj(), time.perf_counter()
            stop.set(); th.join()
            dt = t1 - t0
            mhz = sum(clocks) / max(1, len(clocks))
            tf = n_calls * flops / dt / 1e12
            print(f"| {name} | {v} | {r} | {tf:.0f} | {(e1 - e0) / 1000 / n_calls:.4f} | {(e1 - e0) / 1000 / dt:.0f} | {mhz:.0f} | {tf / mhz * 1000:.0f} |", flush=True)
