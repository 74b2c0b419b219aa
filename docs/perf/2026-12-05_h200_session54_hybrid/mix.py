"""Train with attention's forward from one backend and its backward from another.

    ATTN_MIX=thunderkittens,sdpa torchrun --standalone --nproc_per_node=1 \
        docs/perf/2026-12-05_h200_session54_hybrid/mix.py --model.attention=thunderkittens <trainer args>

ATTN_MIX is "forward backend,backward backend", each one of kernels.attention's fast backends
(sdpa, triton, thunderkittens). The GPU runs ask for --model.attention=thunderkittens: that backend's
module-level `attention` is what this script replaces, so the config checks and the model's call
path stay those of a TK run. The pair is joined through the backend contract (out and a natural-log
LSE of shape (B, Hq, Sq)), which every backend honours since context parallelism relies on it.

Why: section 7's 16-layer TK runs on one H200 leave the five SDPA runs' range at most steps from 13
to 35, where our Triton kernel's runs stay inside. Swapping one half at a time says whether TK's
forward or its backward sets that path apart. A probe for docs/benchmarks.md, not a feature.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

import torch  # noqa: E402

import kernels.attention as attn  # noqa: E402
from kernels.attention import triton_op  # noqa: E402
from kernels.thunderkittens import ops as tk_ops  # noqa: E402

FWD, BWD = os.environ["ATTN_MIX"].split(",")
for _name in (FWD, BWD):
    if _name not in ("sdpa", "triton", "thunderkittens"):
        raise SystemExit(f"ATTN_MIX: {_name!r} is not one of sdpa, triton, thunderkittens")


class _Mixed(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):  # type: ignore[override]
        out, lse = attn.attention_fwd(q, k, v, causal=True, backend=FWD)
        ctx.save_for_backward(q, k, v, out, lse)
        return out

    @staticmethod
    def backward(ctx, dout):  # type: ignore[override]
        q, k, v, out, lse = ctx.saved_tensors
        return attn.attention_bwd(dout, q, k, v, out, lse, causal=True, backend=BWD)


def mixed(q, k, v, *, causal: bool = True, doc_ids=None):
    if not causal or doc_ids is not None:
        raise SystemExit("mix.py covers causal attention without document masks only")
    return _Mixed.apply(q, k, v)


# Both modules' entry points: the GPU runs name thunderkittens; a CPU dry run of this script names
# triton (which runs there in Triton's interpreter) with ATTN_MIX=sdpa,sdpa.
tk_ops.attention = mixed
triton_op.attention = mixed

if __name__ == "__main__":
    print(f"mix.py: attention forward {FWD}, backward {BWD}", flush=True)
    from trainer.train import main, run_and_leave

    run_and_leave(main)
