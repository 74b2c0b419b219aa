"""FP8 GEMM 8192^3 for Nsight Compute: python3 session/gemm_probe.py tk|cublas [m n k]"""
import sys
import torch
from kernels.fp8 import reference as R
impl = sys.argv[1]
m, n, k = (int(x) for x in sys.argv[2:5]) if len(sys.argv) > 4 else (8192, 8192, 8192)
g = torch.Generator(device="cuda").manual_seed(0)
x = torch.randn(m, k, device="cuda", generator=g).bfloat16()
w = (torch.randn(n, k, device="cuda", generator=g) * 0.02).bfloat16()
qx, sx = R.quantize_rowwise(x); qw, sw = R.quantize_rowwise(w); sw = sw.reshape(1, -1)
if impl == "tk":
    from kernels.thunderkittens import ops
    fn = lambda: ops.fp8_gemm_rowwise(qx, qw, sx, sw)
else:
    fn = lambda: torch._scaled_mm(qx, qw.t(), sx, sw, out_dtype=torch.bfloat16, use_fast_accum=True)
for _ in range(4):
    fn()
torch.cuda.synchronize()
