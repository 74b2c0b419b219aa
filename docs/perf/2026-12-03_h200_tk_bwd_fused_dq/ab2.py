"""Where call 1's slowdown of the fused dQ conversion comes from (anchor shape, timing only): main
("head": this tree, main's ops) against fused_dq.patch ("fused") and two variants of it that are
wrong on purpose, for the timing alone: "no consumer fence" (the consumers count their adds with a
relaxed shared-memory add: no MEMBAR.ALL.CTA before each iteration's reds, so the count no longer
orders them) and "no counting" (the producer warps poll the consumers' counts but make no global
atomics and convert nothing: dq is left unwritten). do_bench medians of forward + backward,
builds rotated round by round, `cooldown` s idle before each measurement.

  python3 docs/perf/2026-12-03_h200_tk_bwd_fused_dq/ab2.py [rounds] [cooldown]
"""
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
import ab  # noqa: E402  (patched, buffers, alloc_ab)
from kernels.thunderkittens import bench as B  # noqa: E402
from kernels.thunderkittens import build, ops  # noqa: E402

ATOM = ('asm volatile("atom.acq_rel.gpu.global.add.s32 %0, [%1], 1;\\n"\n'
        '                                         : "=r"(before)\n'
        '                                         : "l"(g.counters + 1 + blk / C::DQ_BLOCK)\n'
        '                                         : "memory");')


def fused(*edits):
    """Source edit for alloc_ab.edited_extension: fused_dq.patch on main's sources (not ops.py),
    then the (old, new) text edits of attention_bwd_sm90.cu."""
    def edit(file_name, text):
        text = ab.patched(file_name, text)
        for old, new in edits if file_name == "attention_bwd_sm90.cu" else ():
            assert text.count(old) == 1, old
            text = text.replace(old, new)
        return text

    return edit


def fused_bwd(ext, dout, q, k, v, out, lse):
    """fused_dq.patch's ops.tk_attn_bwd (default mode) on its binding."""
    delta, lse2, dq_acc, dkv_acc, dq, dk, dv = ab.buffers(ext, q, k)
    b, sq, hq, _ = q.shape
    counters = torch.empty(ext.attn_bwd_counter_count(b, sq, hq), dtype=torch.int32, device=q.device)
    ext.attn_bwd(dout, q, k, v, out, lse, None, delta, lse2, dq_acc, dkv_acc, counters, dq, dk, dv, True,
                 False, torch.cuda.current_stream().cuda_stream)
    return dq, dk, dv


def anchor_ab(exts, rounds, cooldown, check=None):
    """Forward+backward TFLOP/s at the anchor shape of the builds in exts ("head": main's ops, the
    others fused_bwd), rotated round by round; check(step) runs first when given."""
    names = list(exts)
    b, hq, hkv, s, d = B.ATTN_SHAPES["anchor"]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    flops = 4.0 * b * hq * s * s * d / 2

    def step(n):
        build._EXTENSION = exts[n]
        out, lse = ops.tk_attn_fwd(q, k, v, True)
        if n == "head":
            return ops.tk_attn_bwd(do, q, k, v, out, lse, True, None)
        return fused_bwd(exts[n], do, q, k, v, out, lse)

    if check is not None:
        check(step)
    both = {n: [] for n in names}
    for r in range(rounds):
        for n in names[r % len(names):] + names[:r % len(names)]:
            time.sleep(cooldown)
            both[n].append(3.5 * flops / B._time(lambda n=n: step(n)) / 1e9)
    print("| anchor | fwd+bwd TFLOP/s by round | median |")
    print("|---|---|---|")
    for n in names:
        x = both[n]
        print(f"| {n} | {', '.join(f'{v:.0f}' for v in x)} | {sorted(x)[len(x) // 2]:.0f} |", flush=True)


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"head": build.extension()}
    exts["fused"] = ab.alloc_ab.edited_extension("titankit_tk_fused", fused())
    exts["no consumer fence"] = ab.alloc_ab.edited_extension("titankit_tk_nofence", fused(
        ("red.release.cta.shared::cta.add.u32", "red.relaxed.cta.shared::cta.add.u32")))
    exts["no counting"] = ab.alloc_ab.edited_extension("titankit_tk_nocount", fused((ATOM, "before = -2;")))
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    anchor_ab(exts, rounds, cooldown)


if __name__ == "__main__":
    main()
