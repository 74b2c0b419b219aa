"""Is the TK attention backward bitwise reproducible run to run? Two backward calls of one build on
the same inputs; dQ (and dK, dV where a KV head's query heads are split over CTAs) are summed by
fp32 reduce-adds from many CTAs, in an order that can change between calls."""
import torch

from kernels.thunderkittens import ops

for name, (hq, hkv) in {"anchor": (64, 8), "70b-tp8": (8, 1)}.items():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(1, 8192, h, 128, device="cuda", generator=g).bfloat16()
                   for h in (hq, hkv, hkv, hq))
    o, lse = ops.attention_fwd(q, k, v, causal=True)
    a = ops.attention_bwd(do, q, k, v, o, lse, causal=True)
    b = ops.attention_bwd(do, q, k, v, o, lse, causal=True)
    print(name, "same build, two calls, bitwise equal (dq, dk, dv):",
          [torch.equal(x, y) for x, y in zip(a, b)],
          "max abs diff:", [(x.float() - y.float()).abs().max().item() for x, y in zip(a, b)])
