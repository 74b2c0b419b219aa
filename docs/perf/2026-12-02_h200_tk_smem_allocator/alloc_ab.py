"""A/B of the ThunderKittens kernels with titankit's shared-memory allocator (detail::smem_allocator,
the base aligned once, tiles at compile-time offsets) against TK's tma_swizzle_allocator (each
allocation aligned again at run time). The "tk allocator" build is the same sources with the one
line per kernel swapped back, compiled here into a second extension (titankit_tk_old); the ops
switch between the two by replacing build._EXTENSION.

For each attention shape: forward output and LSE bitwise, dK and dV bitwise, dQ within the spread
of its fp32 adds; then forward and forward+backward do_bench medians, builds interleaved and rotated,
`cooldown` s idle before each measurement. Then the FP8 GEMM shapes: outputs bitwise, TFLOP/s
against _scaled_mm fast accumulation.

  python3 docs/perf/2026-12-02_h200_tk_smem_allocator/alloc_ab.py [rounds] [cooldown]
"""
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

NEW_LINE = "    detail::smem_allocator al(&smem[0]);"
OLD_LINE = "    tma_swizzle_allocator al((int*)&smem[0]);"


def med(x):
    return sorted(x)[len(x) // 2]


def fmt(x):
    return ", ".join(f"{v:.0f}" for v in x)


def edited_extension(name, edit):
    """The kernels built as extension `name` from a temporary copy of their sources, each file's
    text passed through edit(file_name, text) first."""
    from torch.utils import cpp_extension

    tmp = Path(tempfile.mkdtemp(prefix=f"{name}_"))
    for f in build.SRC_DIR.iterdir():
        if f.suffix in (".cu", ".cuh", ".h", ".cpp"):
            (tmp / f.name).write_text(edit(f.name, f.read_text()))
    flags = [x for x in build.nvcc_flags(build.tk_root()) if x != f"-I{build.SRC_DIR}"] + [f"-I{tmp}"]
    return cpp_extension.load(name=name, sources=[str(tmp / s) for s in build.SOURCES],
                              extra_cflags=build.CXX_FLAGS, extra_cuda_cflags=flags,
                              extra_ldflags=build.ld_flags(), build_directory=None)


def old_extension():
    def swap(file_name, text):
        if file_name.endswith(".cu"):
            assert text.count(NEW_LINE) == 1, file_name
            text = text.replace(NEW_LINE, OLD_LINE)
        return text

    return edited_extension("titankit_tk_old", swap)


def attention_ab(exts, rounds, cooldown, shapes=None):
    """The attention A/B of two builds (exts: name -> extension, the first is the one under test):
    forward output and LSE bitwise, dK and dV bitwise, dQ's largest difference; then do_bench
    medians of the forward and forward+backward, builds alternating first round by round,
    `cooldown` s idle before each measurement. shapes: name -> (B, Hq, Hkv, S, D), by default the
    bench's anchor, 8B and 70B-TP8. Leaves the first build installed."""
    names = list(exts)
    shapes = shapes or {n: B.ATTN_SHAPES[n] for n in ("anchor", "8b", "70b-tp8")}
    print(f"| shape | build | fwd by round | fwd median | fwd+bwd by round | fwd+bwd median | checks vs {names[1]} |")
    print("|---|---|---|---|---|---|---|")
    for shape, (b, hq, hkv, s, d) in shapes.items():
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


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    exts = {"titankit allocator": build.extension()}
    t0 = time.time()
    exts["tk allocator"] = old_extension()
    print(f"old build {time.time() - t0:.0f} s", flush=True)
    names = list(exts)
    attention_ab(exts, rounds, cooldown)
    print()
    print("| GEMM | scales | build | TFLOP/s by round | median | bitwise vs tk allocator |")
    print("|---|---|---|---|---|---|")
    for shape in ("8192^3", "8B w1/w3"):
        m, n_, k_ = B.GEMM_SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        a8 = torch.randn(m, k_, device="cuda", generator=g).to(torch.float8_e4m3fn)
        b8 = torch.randn(n_, k_, device="cuda", generator=g).to(torch.float8_e4m3fn)
        for kind in ("rowwise", "tensorwise"):
            if kind == "rowwise":
                sa = torch.rand(m, 1, device="cuda", generator=g) + 0.5
                sb = torch.rand(1, n_, device="cuda", generator=g) + 0.5
            else:
                sa = torch.tensor(0.7, device="cuda")
                sb = torch.tensor(1.3, device="cuda")
            outs = {}
            for n in names:
                build._EXTENSION = exts[n]
                outs[n] = ops.fp8_gemm_rowwise(a8, b8, sa, sb)
            same = torch.equal(outs[names[0]], outs[names[1]])
            fns = {n: (lambda n=n: (setattr(build, "_EXTENSION", exts[n]), ops.fp8_gemm_rowwise(a8, b8, sa, sb))) for n in names}
            fns["_scaled_mm fast accum"] = lambda: torch._scaled_mm(a8, b8.t(), sa.reshape(-1, 1) if kind == "rowwise" else sa,
                                                                     sb.reshape(1, -1) if kind == "rowwise" else sb,
                                                                     out_dtype=torch.bfloat16, use_fast_accum=True)
            tf = {n: [] for n in fns}
            order = list(fns)
            for r in range(rounds):
                for n in order[r % len(order):] + order[:r % len(order)]:
                    if n in exts:
                        build._EXTENSION = exts[n]
                    time.sleep(cooldown)
                    tf[n].append(2.0 * m * n_ * k_ / B._time(fns[n]) / 1e9)
            for n in order:
                print(f"| {shape} | {kind} | {n} | {fmt(tf[n])} | {med(tf[n]):.0f} | {same if n in exts else ''} |", flush=True)
    build._EXTENSION = exts[names[0]]


if __name__ == "__main__":
    main()
