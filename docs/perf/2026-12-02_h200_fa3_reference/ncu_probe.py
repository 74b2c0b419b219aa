"""Four causal attention forward+backward passes at the anchor shape (B 1, Hq 64, Hkv 8, S 8192,
D 128) for Nsight Compute, with ThunderKittens (`tk`) or FlashAttention-3 (`fa3`):

    ncu --clock-control none --launch-skip 2 --launch-count 1 -k regex:fwd_kernel ... ncu_probe.py tk
    ncu ... -k regex:FlashAttnFwdSm90 ... ncu_probe.py fa3   (backward: bwd_kernel / FlashAttnBwdSm90)
"""
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
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
    import fa3_bench
    import fa3_build

    fa3_build.load(os.environ.get("FA3_ROOT", ".fa3"), verbose=False)
    fn = fa3_bench.fa3
for _ in range(4):
    torch.autograd.grad(fn(*leaves), leaves, do)
torch.cuda.synchronize()
