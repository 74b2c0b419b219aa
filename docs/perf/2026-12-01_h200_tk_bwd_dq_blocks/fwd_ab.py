"""A/B of the TK forward ping-pong (TK_FWD_PP=0/1, read per launch) against cuDNN, same process."""
import os, torch, triton.testing
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel
from kernels.thunderkittens import ops
shapes = {"anchor": (1, 64, 8, 8192, 128), "8b": (1, 32, 8, 8192, 128), "70b-tp8": (1, 8, 1, 8192, 128)}
def cudnn(q, k, v):
    with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
        return F.scaled_dot_product_attention(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2),
                                              is_causal=True, enable_gqa=True).transpose(1, 2)
tk = lambda q, k, v: ops.attention(q, k, v, causal=True)
print("| shape | impl | fwd TFLOP/s | fwd+bwd TFLOP/s |")
for name, (b, hq, hkv, s, d) in shapes.items():
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    flops = 4.0 * b * hq * s * s * d / 2
    ref = cudnn(q, k, v)
    for rep in range(2):
        for impl, fn, pp in (("tk pp0", tk, "0"), ("tk pp1", tk, "1"), ("cudnn", cudnn, "0")):
            os.environ["TK_FWD_PP"] = pp
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            with torch.no_grad():
                err = (fn(q, k, v).float() - ref.float()).abs().max().item()
                fwd = triton.testing.do_bench(lambda: fn(q, k, v), warmup=25, rep=100, return_mode="median")
            both = triton.testing.do_bench(lambda: torch.autograd.grad(fn(*leaves), leaves, do),
                                           warmup=25, rep=100, return_mode="median")
            print(f"| {name} | {impl} (rep {rep}) | {flops / fwd / 1e9:.0f} | {3.5 * flops / both / 1e9:.0f} | err {err:.1e}")
