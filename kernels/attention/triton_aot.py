"""Compile the Triton attention configs ahead of time for sm_90 on a machine without a GPU, and
report per config: compile seconds, shared memory, registers and spills (from ptxas -v).

    python -m kernels.attention.triton_aot                      # every tile set, hdim 128 and 64
    python -m kernels.attention.triton_aot --dtypes fp32 --head-dims 128 --kernels dkdv

Why: a tile's compile cost and its shared memory are properties of the compiler, not the GPU, so
they can be checked before a config reaches the H200s (fp32 tiles once spilled for minutes of
ptxas there). Arguments mimic one launch of the debug model (B 4, S 1024, Hq 8, Hkv 2, causal, no
document mask) and are specialised exactly as Triton's JIT would (16-divisible pointers and ints,
ints equal to 1 as constants). Uses Triton's JIT internals (create_function_from_signature,
JITFunction._pack_args; present in Triton 3.6 to 3.9). Must run without TRITON_INTERPRET=1.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import math
import os
import re
import sys
import tempfile
import time

import torch

from kernels.scoped_env import scoped_env

KERNELS = ("fwd", "fwd_tma", "dkdv", "dq")
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
B, S, HQ, HKV = 4, 1024, 8, 2  # the debug model at dim 1024, 8 heads, 2 KV heads
DKDV_SPLIT = 4  # what triton_launch.dkdv_split picks for that shape on 132 SMs


def _modules():
    if os.environ.get("TRITON_INTERPRET", "0") not in ("", "0"):
        raise ValueError("kernels.attention.triton_aot compiles for the GPU: unset "
                         "TRITON_INTERPRET (the interpreter's kernels cannot be compiled)")
    from kernels.attention import triton_blocks, triton_bwd, triton_fwd, triton_launch

    if triton_launch.interpreted():
        raise ValueError("kernels.attention.triton_aot: the kernel modules were imported under "
                         "TRITON_INTERPRET=1; run in a fresh process without it")
    return triton_blocks, triton_bwd, triton_fwd, triton_launch


def tiles(kernel: str, dtype: torch.dtype) -> list[tuple[int, int, int, int]]:
    """The tile set the launcher autotunes for `kernel` on inputs of `dtype`."""
    *_, triton_launch = _modules()
    name = "fwd" if kernel.startswith("fwd") else kernel
    obj = triton_launch.tuned(name, dtype, tma=kernel == "fwd_tma")
    return [(c.kwargs["BLOCK_M"], c.kwargs["BLOCK_N"], c.num_warps, c.num_stages)
            for c in obj.configs]


def _launch_args(kernel: str, dtype: torch.dtype, d: int, bm: int, bn: int):
    """(jit function, positional args, constexpr kwargs) of one launch, on CPU tensors."""
    from triton.tools.tensor_descriptor import TensorDescriptor

    triton_blocks, triton_bwd, triton_fwd, triton_launch = _modules()
    q = torch.empty(B, S, HQ, d, dtype=dtype)
    k = torch.empty(B, S, HKV, d, dtype=dtype)
    v = torch.empty_like(k)
    rows = torch.empty(B, HQ, S, dtype=torch.float32)  # lse / lse2 / delta
    dummy = torch.zeros(1, dtype=torch.int32)  # document tables (no document mask)
    docs = (dummy, dummy, dummy, dummy)
    doc_strides = (1, 1, 1)
    scalars = (1.0 / math.sqrt(d), triton_blocks.seq_bucket(S), triton_blocks.seq_bucket(S))
    meta = dict(HEAD_DIM=d, CAUSAL=True, HAS_DOC=False, GRAN=triton_launch.granule(dtype),
                PREC=triton_launch.prec(q), BLOCK_M=bm, BLOCK_N=bn)

    def strides(t):
        return t.stride()[:3]

    def desc(t, block_rows):
        b, s, h, dd = t.shape
        return TensorDescriptor(t, shape=[b * s, h * dd], strides=[t.stride(1), 1],
                                block_shape=[block_rows, dd])

    if kernel in ("fwd", "fwd_tma"):
        tma = kernel == "fwd_tma"
        out = torch.empty_like(q)
        descs = (desc(q, bm), desc(k, bn), desc(v, bn)) if tma else (None, None, None)
        args = (q, k, v, out, rows, *docs, *descs, *strides(q), *strides(k), *strides(v),
                *strides(out), *doc_strides, HQ, HQ // HKV, S, S, 0, *scalars)
        return triton_fwd.attn_fwd_kernel, args, dict(meta, TMA=tma)
    if kernel == "dkdv":
        dk = torch.empty(B, S, HKV * DKDV_SPLIT, d, dtype=torch.float32)
        dq_acc = torch.zeros(1, 1, 1, 1, dtype=torch.float32)
        args = (q, k, v, q, rows, rows, dk, dk, dq_acc, *docs, None, None, None,
                *strides(q), *strides(k), *strides(v), *strides(q), *strides(dk), *strides(dk),
                *strides(dq_acc), *doc_strides, HQ, HKV, HQ // HKV, DKDV_SPLIT, S, S, 0, *scalars)
        return triton_bwd.attn_bwd_dkdv_kernel, args, dict(meta, DQ_ATOMIC=0, TMA=False,
                                                           HEADS_INNER=False)
    if kernel == "dq":
        dq = torch.empty_like(q)
        args = (q, k, v, q, rows, rows, dq, *docs, None, None, *strides(q), *strides(k),
                *strides(v), *strides(q), *strides(dq), *doc_strides, HQ, HQ // HKV, S, S, 0,
                *scalars)
        return triton_bwd.attn_bwd_dq_kernel, args, dict(meta, TMA=False)
    raise ValueError(f"kernels.attention.triton_aot: unknown kernel {kernel!r}; valid: {KERNELS}")


def compile_config(kernel: str, dtype: torch.dtype, head_dim: int,
                   tile: tuple[int, int, int, int]) -> dict:
    """Compile one config for sm_90 (CUDA target 9.0, no device needed); returns seconds, shared
    (bytes), regs, spill_stores, spill_loads (bytes per thread), or error (a failed compile)."""
    import triton
    from triton import knobs
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    bm, bn, warps, stages = tile
    fn, args, meta = _launch_args(kernel, dtype, head_dim, bm, bn)
    meta = dict(meta, num_warps=warps, num_stages=stages)
    target = GPUTarget("cuda", 90, 32)
    backend = make_backend(target)
    binder = create_function_from_signature(fn.signature, fn.params, backend)
    bound, spec, options = binder(*args, **meta)
    options, signature, constexprs, attrs = fn._pack_args(backend, meta, bound, spec, options)
    log = io.StringIO()
    row = dict(kernel=kernel, dtype=str(dtype).replace("torch.", ""), head_dim=head_dim,
               tile=tuple(tile))
    old_log = knobs.nvidia.dump_ptxas_log
    knobs.nvidia.dump_ptxas_log = True  # Triton prints ptxas -v output: registers and spills
    # A fresh cache directory per compile: a cache hit would time nothing.
    with tempfile.TemporaryDirectory(prefix="titankit-aot-") as cache, \
            scoped_env("TRITON_CACHE_DIR", cache), contextlib.redirect_stdout(log):
        start = time.perf_counter()
        try:
            kern = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target,
                                  options=options.__dict__)
        except Exception as e:  # noqa: BLE001 - a config that fails to compile is a result
            row["error"] = f"{type(e).__name__}: {str(e).splitlines()[0][:200]}"
            kern = None
        finally:
            knobs.nvidia.dump_ptxas_log = old_log
        row["seconds"] = time.perf_counter() - start
    if kern is not None:
        text = log.getvalue()
        row["shared"] = kern.metadata.shared
        for key, pattern in (("regs", r"Used (\d+) registers"),
                             ("spill_stores", r"(\d+) bytes spill stores"),
                             ("spill_loads", r"(\d+) bytes spill loads")):
            found = re.search(pattern, text)
            row[key] = int(found.group(1)) if found else None
    return row


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--kernels", default=",".join(KERNELS))
    p.add_argument("--dtypes", default="bf16,fp32")
    p.add_argument("--head-dims", default="128,64")
    args = p.parse_args(argv)
    os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")  # Triton's default; quiets 3.9's warning
    try:
        triton_blocks, *_ = _modules()
    except ValueError as e:
        print(e, file=sys.stderr)
        return 2
    print("| kernel | dtype | hdim | tile (BM, BN, warps, stages) | compile s | shared B "
          "(formula) | regs | spill st/ld B |")
    print("|---|---|---|---|---|---|---|---|")
    for d in (int(x) for x in args.head_dims.split(",")):
        for dname in args.dtypes.split(","):
            dtype = DTYPES[dname]
            for kernel in args.kernels.split(","):
                for tile in tiles(kernel, dtype):
                    r = compile_config(kernel, dtype, d, tile)
                    est = triton_blocks.smem_bytes(kernel.removesuffix("_tma"), tile, d,
                                                   dtype.itemsize)
                    tail = (f"error: {r['error']}" if "error" in r else
                            f"{r['shared']} ({est}) | {r['regs']} | "
                            f"{r['spill_stores']}/{r['spill_loads']}")
                    print(f"| {kernel} | {dname} | {d} | {tile} | {r['seconds']:.1f} | {tail} |",
                          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
