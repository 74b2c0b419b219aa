"""Four causal attention forward+backward passes at the anchor shape, for Nsight Compute:

    ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:bwd_kernel \
        --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats \
        python3 docs/perf/2026-11-30_h200_tk_bwd_experiments/ncu_probe.py tk       # or: cudnn (-k regex:bprop)
"""
import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

impl = sys.argv[1] if len(sys.argv) > 1 else "tk"
b, hq, hkv, s, d = 1, 64, 8, 8192, 128
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
leaves = [t.detach().requires_grad_() for t in (q, k, v)]
if impl == "tk":
    from kernels.thunderkittens import ops

    def fn(q, k, v):
        return ops.attention(q, k, v, causal=True)
else:
    def fn(q, k, v):
        with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
            return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                                  is_causal=True, enable_gqa=True).transpose(1, 2)
for _ in range(4):
    torch.autograd.grad(fn(*leaves), leaves, do)
torch.cuda.synchronize()
