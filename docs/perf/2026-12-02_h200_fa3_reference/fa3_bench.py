"""The ThunderKittens attention bench (kernels.thunderkittens.bench.attention_rows: same shapes,
same do_bench timing, rotated rounds, idle GPU before each measurement) with FlashAttention-3 as one
more row, so that issue 10's target (600 TFLOP/s forward+backward, taken from FA3's published H100
figures) can be read against FA3 itself on this H200.

  python3 docs/perf/2026-12-02_h200_fa3_reference/fa3_bench.py [shapes] [rounds] [cooldown]

Before the timing it checks FA3's forward, LSE and gradients against cuDNN SDPA at each shape (max
abs differences printed), so the row is known to compute the same attention.
"""

from __future__ import annotations

import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import fa3_build  # noqa: E402
from kernels.thunderkittens import bench as B  # noqa: E402


class FA3(torch.autograd.Function):
    """FA3 causal attention on (B, S, H, D) bf16, GQA by head counts; backward through its bwd op."""

    @staticmethod
    def forward(ctx, q, k, v):
        out, lse, *_ = torch.ops.flash_attn_3.fwd(q, k, v, is_causal=True)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, do):
        q, k, v, out, lse = ctx.saved_tensors
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        torch.ops.flash_attn_3.bwd(do.contiguous(), q, k, v, out, lse, dq, dk, dv, is_causal=True)
        return dq, dk, dv


def fa3(q, k, v):
    return FA3.apply(q, k, v)


def check(shape) -> str:
    """Max abs differences of FA3's output, LSE and dq/dk/dv against cuDNN SDPA (fp32 math LSE)."""
    b, hq, hkv, s, d = shape
    g = torch.Generator(device="cuda").manual_seed(1)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
                   for h in (hq, hkv, hkv, hq))
    diffs = []
    outs = {}
    for name, fn in (("fa3", fa3), ("cudnn", B.cudnn_attention)):
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        out = fn(*leaves)
        grads = torch.autograd.grad(out, leaves, do)
        outs[name] = (out.float(), *[x.float() for x in grads])
    for i, label in enumerate(("out", "dq", "dk", "dv")):
        diffs.append(f"{label} {(outs['fa3'][i] - outs['cudnn'][i]).abs().max().item():.1e}")
    _, lse, *_ = torch.ops.flash_attn_3.fwd(q, k, v, is_causal=True)
    rep = hq // hkv
    kf = k.float().repeat_interleave(rep, dim=2)
    scores = torch.einsum("bqhd,bkhd->bhqk", q.float(), kf) / d ** 0.5
    scores.masked_fill_(torch.ones(s, s, device="cuda", dtype=torch.bool).triu(1), float("-inf"))
    ref_lse = torch.logsumexp(scores, dim=-1)  # (b, h, s)
    diffs.append(f"lse {(lse.float() - ref_lse).abs().max().item():.1e}")
    return ", ".join(diffs)


def main() -> int:
    shapes = (sys.argv[1] if len(sys.argv) > 1 else "anchor,8b,70b-tp8").split(",")
    rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
    cooldown = float(sys.argv[3]) if len(sys.argv) > 3 else 3.0
    fa3_build.load(os.environ.get("FA3_ROOT", ".fa3"), verbose=False)
    for name in shapes:
        small = list(B.ATTN_SHAPES[name])
        small[3] = 2048  # the fp32 LSE reference needs S x S scores per head
        print(f"check {name} at S 2048 vs cuDNN: {check(tuple(small))}", flush=True)
    plain = B._attention_impls

    def with_fa3(deterministic: bool = False) -> dict:
        impls = plain(deterministic)
        impls["flash-attention 3"] = fa3
        return impls

    B._attention_impls = with_fa3
    import triton
    print(f"# {torch.cuda.get_device_name()}, torch {torch.__version__}, triton {triton.__version__}; "
          f"rounds {rounds}, cooldown {cooldown} s")
    rows = ["| shape | implementation | fwd ms | fwd TFLOP/s | fwd+bwd ms | fwd+bwd TFLOP/s "
            "| fwd+bwd TFLOP/s by round | max abs diff vs cuDNN (fwd) |",
            "|---|---|---|---|---|---|---|---|"]
    for name in shapes:
        rows += B.attention_rows(name, B.ATTN_SHAPES[name], rounds, cooldown=cooldown)
        print("\n".join(rows[-4:]), flush=True)
    print("\n".join(rows))
    return 0


if __name__ == "__main__":
    sys.exit(main())
