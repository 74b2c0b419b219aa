"""A/B of TK attention backward variants selected per launch by an environment variable that exists
only in the patches of this folder (AB_VAR: TK_BWD_DQ_TURNS, the default, or TK_BWD_EXP_OVERLAP; value 0
= the committed schedule), interleaved in one process, with cuDNN beside them. Forward+backward and
backward alone.

    python3 ab.py SHAPES ROUNDS VARIANTS     e.g. anchor,8b,70b-tp8 4 0,2,1
"""
import os
import sys

import torch

sys.path.insert(0, os.getcwd())
from kernels.thunderkittens.bench import ATTN_SHAPES, _attention_impls, _time

_impls = _attention_impls()  # the section 4 bench's own cuDNN SDPA and TK calls
cudnn, tk = _impls["sdpa cudnn"], _impls["thunderkittens"]
VAR = os.environ.get("AB_VAR", "TK_BWD_DQ_TURNS")  # the patch's variable
shapes = sys.argv[1].split(",") if len(sys.argv) > 1 else ["anchor", "8b", "70b-tp8"]
rounds = int(sys.argv[2]) if len(sys.argv) > 2 else 3
variants = sys.argv[3].split(",") if len(sys.argv) > 3 else ["0", "1"]
res = {}


def flops_of(name: str) -> float:
    b, hq, _, s, d = ATTN_SHAPES[name]
    return 4.0 * b * hq * s * s * d / 2  # causal forward


for name in shapes:
    b, hq, hkv, s, d = ATTN_SHAPES[name]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    flops = flops_of(name)
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    # correctness of the variant against the committed kernel (same inputs)
    grads = {}
    for var in variants:
        os.environ[VAR] = var
        grads[var] = torch.autograd.grad(tk(*leaves), leaves, do)
    for var in variants[1:]:
        diff = max((a.float() - b_.float()).abs().max().item() for a, b_ in zip(grads[variants[0]], grads[var]))
        print(f"{name}: max |grad({var}) - grad({variants[0]})| = {diff:.2e}", flush=True)
    for r in range(rounds):
        for var in [*variants, "cudnn"]:
            fn = cudnn if var == "cudnn" else tk
            if var != "cudnn":
                os.environ[VAR] = var
            out = fn(*leaves)
            bwd = _time(lambda: torch.autograd.grad(out, leaves, do, retain_graph=True))
            both = _time(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
            res.setdefault((name, var), []).append((both, bwd))
            print(f"{name} round {r} {var}: fwd+bwd {3.5 * flops / both / 1e9:.0f} TFLOP/s, "
                  f"bwd {2.5 * flops / bwd / 1e9:.0f}", flush=True)
print("\n| shape | kernel | fwd+bwd TFLOP/s (rounds) | bwd TFLOP/s (rounds) |\n|---|---|---|---|")
for (name, var), v in res.items():
    flops = flops_of(name)
    label = "cuDNN" if var == "cudnn" else ("TK committed" if var == "0" else f"TK {VAR}={var}")
    print(f"| {name} | {label} | {' '.join(f'{3.5 * flops / x[0] / 1e9:.0f}' for x in v)} | "
          f"{' '.join(f'{2.5 * flops / x[1] / 1e9:.0f}' for x in v)} |")
