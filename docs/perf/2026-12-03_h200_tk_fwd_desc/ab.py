"""A/B of three kernel changes against main, in one process (4r's attention A/B):
  fdesc         the forward builds its K and V ring's wgmma descriptors once (fwd_desc.patch)
  fdesc_vfirst  the same, and each iteration waits for V_{i-1} before K_i, so that nothing branches
                between the issue of S_i = Q K_i^T and of P_{i-1} V_{i-1}
  dqds          the backward's dQ wgmmas take their four dS^T descriptors built once
                (../2026-12-03_h200_tk_bwd_desc/dq_ds_desc.patch)
Each variant is first checked against main: forward output and LSE bitwise, dK and dV bitwise (not
expected at 70B-TP8, whose split adds vary), dQ's largest difference. Then do_bench medians of the
forward and forward+backward, builds in rotated order each round, `cooldown` s idle before each.

  python3 docs/perf/2026-12-03_h200_tk_fwd_desc/ab.py [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(HERE.parent / "2026-12-03_h200_tk_bwd_fused_dq"))
import alloc_ab  # noqa: E402  (edited_extension, attention_ab)
import ab as fused_ab  # noqa: E402  (patched: one file's part of a patch, applied or undone)

WAIT_K = "            wait(k_full[s], (i / STAGES) & 1);\n"
WAIT_V = "            wait(v_full[sp], ((i - 1) / STAGES) & 1);\n"


def fdesc(name, text):
    return fused_ab.patched(name, text, False, HERE / "fwd_desc.patch")


def fdesc_vfirst(name, text):
    text = fdesc(name, text)
    if name == "attention_fwd_sm90.cu":
        assert text.count(WAIT_K) == 1 and text.count(WAIT_V) == 1
        text = text.replace(WAIT_V, "").replace(WAIT_K, WAIT_V + WAIT_K)
    return text


def dqds(name, text):
    return fused_ab.patched(name, text, False, HERE.parent / "2026-12-03_h200_tk_bwd_desc" / "dq_ds_desc.patch")


def check(exts):
    """Each build's outputs against main's, at every shape."""
    for shape, (b, hq, hkv, s, d) in ((n, B.ATTN_SHAPES[n]) for n in ("anchor", "8b", "70b-tp8")):
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
        res = {}
        for n, ext in exts.items():
            build._EXTENSION = ext
            out, lse = torch.ops.titankit.tk_attn_fwd(q, k, v, True)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            res[n] = (out, lse, *torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do))
        m = res["main"]
        for n, a in res.items():
            if n != "main":
                print(f"check {shape} {n}: out, lse bitwise {torch.equal(a[0], m[0]) and torch.equal(a[1], m[1])}; "
                      f"dk, dv bitwise {torch.equal(a[3], m[3]) and torch.equal(a[4], m[4])}; "
                      f"dq max diff {(a[2].float() - m[2].float()).abs().max().item():.1e}", flush=True)


if __name__ == "__main__":
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"main": build.extension()}
    for name, edit in (("fdesc", fdesc), ("fdesc_vfirst", fdesc_vfirst), ("dqds", dqds)):
        exts[name] = alloc_ab.edited_extension(f"titankit_tk_{name}", edit)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    check(exts)
    alloc_ab.attention_ab(exts, rounds, cooldown)
