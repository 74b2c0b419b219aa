"""Three causal attention forward+backward passes at one shape, for Nsight Compute.
Usage: python3 ncu_shape.py tk|tk-det|cudnn HQ HKV S"""
import sys

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import cudnn_attention as cudnn

impl, hq, hkv, s = sys.argv[1], *(int(x) for x in sys.argv[2:5])
g = torch.Generator(device="cuda").manual_seed(0)
q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
leaves = [t.detach().requires_grad_() for t in (q, k, v)]
torch.use_deterministic_algorithms(impl == "tk-det")
fn = (lambda q, k, v: cudnn(q, k, v, causal=True)) if impl == "cudnn" else \
    (lambda q, k, v: ops.attention(q, k, v, causal=True))
for _ in range(3):
    torch.autograd.grad(fn(*leaves), leaves, do)
torch.cuda.synchronize()
