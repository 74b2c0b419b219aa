import time, torch
from kernels import fp8
from kernels.fp8 import reference as R
def host_us(fn, calls=200):
    fn(); torch.cuda.synchronize(); torch.cuda._sleep(200_000_000)
    t0 = time.perf_counter()
    for _ in range(calls): fn()
    dt = time.perf_counter() - t0; torch.cuda.synchronize(); return dt / calls * 1e6
a = torch.randn(8192, 4096, device="cuda").bfloat16(); b = torch.randn(1024, 4096, device="cuda").bfloat16()
qa, sa = R.quantize_tensorwise(a); qb, sb = R.quantize_tensorwise(b)
qar, sar = R.quantize_rowwise(a); qbr, sbr = R.quantize_rowwise(b); sbr = sbr.reshape(1, -1)
for be in ("torch", "thunderkittens"):
    for gran, (x, y, s1, s2) in (("tensorwise", (qa, qb, sa, sb)), ("rowwise", (qar, qbr, sar, sbr))):
        f = lambda: fp8.scaled_mm(x, y.t(), s1, s2, torch.bfloat16, True, be)
        print(f"host us per call {be} {gran}: {host_us(f):.1f}")
