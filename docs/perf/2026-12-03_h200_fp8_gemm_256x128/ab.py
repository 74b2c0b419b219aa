"""A/B of the TK FP8 GEMM: main's 128 x 256 cooperative kernel against the 256 x 128 kernel whose
two 64-row halves take turns in the epilogue under the tensor cores ("overlap", the tree), and the
same 256 x 128 kernel with both halves scaled after all wgmmas retired ("no overlap": the tile
shape alone). One process; builds rotated round by round, `cooldown` s idle before each
measurement; `_scaled_mm` fast accumulation beside them. Checks: each build's relative error
against the fp32 product of the dequantized operands, and its largest difference from main.

  python3 docs/perf/2026-12-03_h200_fp8_gemm_256x128/ab.py [rounds] [cooldown] [shapes]
"""
import os
import subprocess
import sys
import time
from pathlib import Path

import torch

from kernels.fp8 import reference as R
from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-02_h200_tk_smem_allocator"))
import alloc_ab  # noqa: E402  (edited_extension)

GEMM = "gemm_fp8_rowwise_sm90.cu"
SHAPES = dict(B.GEMM_SHAPES)
SHAPES["8B wq"] = (8192, 4096, 4096)


def main_text():
    """main's GEMM source: from `git show HEAD:`, or from the file AB_MAIN_GEMM names (a copy taken
    here before a device call, where the device copy's git metadata may be stale)."""
    if os.environ.get("AB_MAIN_GEMM"):
        return Path(os.environ["AB_MAIN_GEMM"]).read_text()
    root = HERE.parents[2]
    return subprocess.run(["git", "show", f"HEAD:kernels/thunderkittens/{GEMM}"], cwd=root,
                          check=True, capture_output=True, text=True).stdout


def med(x):
    return sorted(x)[len(x) // 2]


def args():
    """rounds, cooldown, shape names from the command line."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 4
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    names = sys.argv[3].split(",") if len(sys.argv) > 3 else ["8192^3", "8B w1/w3", "70B w2", "8B wq"]
    return rounds, cooldown, names


def gemm_ab(exts, rounds, cooldown, names):
    """Checks and do_bench rounds of every build in `exts` (one named "main") and `_scaled_mm` at
    each shape in `names`, rowwise and tensorwise scales; prints one table row per build."""
    print("| GEMM | scales | impl | TFLOP/s by round | median | rel. error vs fp32 | max diff vs main |")
    print("|---|---|---|---|---|---|---|")
    for shape in names:
        m, n, k = SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        qx, sx = R.quantize_rowwise(torch.randn(m, k, device="cuda", generator=g))
        qw, sw = R.quantize_rowwise(torch.randn(n, k, device="cuda", generator=g) * 0.02)
        sw = sw.reshape(1, n)
        for kind in ("rowwise", "tensorwise"):
            sa, sb = (sx, sw) if kind == "rowwise" else (torch.tensor(0.7, device="cuda"),
                                                          torch.tensor(1.3e-2, device="cuda"))
            want = (qx.float() * sa) @ (qw.float() * sb.reshape(-1, 1) if sb.dim() else qw.float() * sb).t()
            outs = {}
            for e in exts:
                build._EXTENSION = exts[e]
                outs[e] = ops.fp8_gemm_rowwise(qx, qw, sa, sb)
            checks = {e: ((o.float() - want).norm() / want.norm()).item() for e, o in outs.items()}
            diffs = {e: (o.float() - outs["main"].float()).abs().max().item() for e, o in outs.items()}
            del want
            fns = {e: (lambda e=e: (setattr(build, "_EXTENSION", exts[e]),
                                    ops.fp8_gemm_rowwise(qx, qw, sa, sb))) for e in exts}
            fns["_scaled_mm"] = lambda: torch._scaled_mm(qx, qw.t(), sa, sb, out_dtype=torch.bfloat16,
                                                         use_fast_accum=True)
            order = list(fns)
            tf = {e: [] for e in order}
            for r in range(rounds):
                for e in order[r % len(order):] + order[:r % len(order)]:
                    time.sleep(cooldown)
                    tf[e].append(2.0 * m * n * k / B._time(fns[e]) / 1e9)
            for e in order:
                print(f"| {shape} | {kind} | {e} | {', '.join(f'{v:.0f}' for v in tf[e])} | {med(tf[e]):.0f} | "
                      f"{checks.get(e, float('nan')):.2e} | {diffs.get(e, float('nan')):.1e} |", flush=True)


def run(tree, variants):
    """Builds the tree's kernels (named `tree`), main's GEMM from `git show HEAD:` ("main") and each
    variant (name -> (extension name, edit of the GEMM's text)), then gemm_ab on the command
    line's arguments; leaves the tree's build installed."""
    rounds, cooldown, names = args()
    t0 = time.time()
    head = main_text()
    exts = {tree: build.extension(),
            "main": alloc_ab.edited_extension("titankit_tk_gemm_main",
                                              lambda f, t: head if f == GEMM else t)}
    for name, (ext_name, edit) in variants.items():
        exts[name] = alloc_ab.edited_extension(ext_name, lambda f, t, edit=edit: edit(t) if f == GEMM else t)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    gemm_ab(exts, rounds, cooldown, names)
    build._EXTENSION = exts[tree]


if __name__ == "__main__":
    run("overlap", {"no overlap": ("titankit_tk_gemm_noov", lambda t: t.replace(
        "constexpr bool OVERLAP = true;", "constexpr bool OVERLAP = false;"))})
