"""A/B of the ThunderKittens attention with the working tree's sources ("tree") against a second
extension built from the same sources with the REVERT edits applied ("head": main before this
change), both in one process. For the anchor, 8B and 70B-TP8 shapes: forward output and LSE
bitwise, dK and dV bitwise, dQ within the spread of its fp32 adds; then do_bench medians of the
forward and of forward+backward, builds alternating first round by round, `cooldown` s idle before
each measurement. Other experiments import it with their own REVERT list.

  python3 docs/perf/2026-12-03_h200_tk_bwd_shared_loads/ab.py [rounds] [cooldown]
"""
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

# (file, text in the tree, text in head): the backward's tiles through detail::smem_allocator,
# whose base is now computed from the pointer itself (so nvcc keeps it in the shared window).
REVERT = [
    ("attention_bwd_sm90.cu", "    detail::smem_allocator al(&smem[0]);",
     "    tma_swizzle_allocator al((int*)&smem[0]);"),
    ("tk_common.cuh",
     "        : base_(static_cast<char*>(smem) +\n"
     "                ((0u - static_cast<uint32_t>(reinterpret_cast<uintptr_t>(smem))) & 1023u)) {}",
     "        : base_(reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem) + 1023) &\n"
     "                                        ~static_cast<uintptr_t>(1023))) {}"),
]


def head_extension(revert):
    from torch.utils import cpp_extension

    tmp = Path(tempfile.mkdtemp(prefix="tk_head_"))
    edits = {}
    for name, tree, head in revert:
        edits.setdefault(name, []).append((tree, head))
    for f in build.SRC_DIR.iterdir():
        if f.suffix in (".cu", ".cuh", ".h", ".cpp"):
            text = f.read_text()
            for tree, head in edits.pop(f.name, []):
                assert text.count(tree) == 1, (f, tree)
                text = text.replace(tree, head)
            (tmp / f.name).write_text(text)
    assert not edits, edits
    flags = [x for x in build.nvcc_flags(build.tk_root()) if x != f"-I{build.SRC_DIR}"] + [f"-I{tmp}"]
    return cpp_extension.load(name="titankit_tk_head", sources=[str(tmp / s) for s in build.SOURCES],
                              extra_cflags=build.CXX_FLAGS, extra_cuda_cflags=flags,
                              extra_ldflags=build.ld_flags())


def main(revert):
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    exts = {"tree": build.extension()}
    t0 = time.time()
    exts["head"] = head_extension(revert)
    print(f"head build {time.time() - t0:.0f} s", flush=True)
    names = list(exts)
    med = lambda x: sorted(x)[len(x) // 2]  # noqa: E731
    fmt = lambda x: ", ".join(f"{v:.0f}" for v in x)  # noqa: E731

    print("| shape | build | fwd by round | fwd median | fwd+bwd by round | fwd+bwd median | checks vs head |")
    print("|---|---|---|---|---|---|---|")
    for shape in ("anchor", "8b", "70b-tp8"):
        b, hq, hkv, s, d = B.ATTN_SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
        res = {}
        for n in names:
            build._EXTENSION = exts[n]
            out, lse = torch.ops.titankit.tk_attn_fwd(q, k, v, True)
            leaves = [t.detach().requires_grad_() for t in (q, k, v)]
            grads = torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)
            res[n] = (out, lse, *grads)
        a, o = res[names[0]], res[names[1]]
        check = (f"out, lse bitwise {torch.equal(a[0], o[0]) and torch.equal(a[1], o[1])}; "
                 f"dk, dv bitwise {torch.equal(a[3], o[3]) and torch.equal(a[4], o[4])}; "
                 f"dq max diff {(a[2].float() - o[2].float()).abs().max().item():.1e}")
        flops = 4.0 * b * hq * s * s * d / 2
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        fwd = {n: [] for n in names}
        both = {n: [] for n in names}
        for r in range(rounds):
            for n in (names if r % 2 == 0 else names[::-1]):
                build._EXTENSION = exts[n]
                time.sleep(cooldown)
                fwd[n].append(flops / B._time(lambda: torch.ops.titankit.tk_attn_fwd(q, k, v, True)) / 1e9)
                time.sleep(cooldown)
                ms = B._time(lambda: torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do))
                both[n].append(3.5 * flops / ms / 1e9)
        for n in names:
            print(f"| {shape} | {n} | {fmt(fwd[n])} | {med(fwd[n]):.0f} | {fmt(both[n])} | {med(both[n]):.0f} | {check} |", flush=True)
    build._EXTENSION = exts[names[0]]


if __name__ == "__main__":
    main(REVERT)
