"""A timing trace of the ThunderKittens backward's main kernel at the anchor shape: trace.patch adds
clock() stamps at the phase boundaries of every consumer iteration (lane 0 of each consumer's first
warp) and at the producer's ring waits, written by the host side of the launch to the file named
by TK_BWD_TRACE. The script builds that variant beside main's kernels, checks it computes the same
outputs and how much the stamps cost (4r's attention A/B, anchor shape), records one traced
backward, and prints where each consumer's iteration time goes and how often the two consumers'
wgmmas are in flight at once.

  python3 docs/perf/2026-12-03_h200_tk_bwd_trace/trace.py OUT_DIR [PATCH]

PATCH (default trace.patch) names the patch in this folder: trace_on_desc_walker.patch is the same
stamps for a tree that holds ../2026-12-03_h200_tk_bwd_desc/desc_walker.patch.
"""
import os
import sys
from pathlib import Path

import numpy as np
import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "2026-12-02_h200_tk_smem_allocator"))
sys.path.insert(0, str(HERE.parent / "2026-12-03_h200_tk_bwd_fused_dq"))
import alloc_ab  # noqa: E402  (edited_extension, attention_ab)
import ab as fused_ab  # noqa: E402  (patched: one file's part of a patch)

PHASES = ["wait Q/dO stage", "issue S^T, dP^T", "wait S^T, dP^T (+ lse2/delta loads)", "softmax, dS^T",
          "wait dS^T buffer free", "store dS^T, arrive", "wait other consumer's dS^T",
          "issue dQ, dV, dK", "wait dQ", "dQ reductions", "wait dV, dK", "arrive, loop top"]


def record(ext, path):
    b, hq, hkv, s, d = B.ATTN_SHAPES["anchor"]
    g = torch.Generator(device="cuda").manual_seed(0)
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
    build._EXTENSION = ext
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    for _ in range(3):
        torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)
    out = ops.attention(*leaves, causal=True)
    torch.cuda.synchronize()
    os.environ["TK_BWD_TRACE"] = str(path)
    torch.autograd.grad(out, leaves, do)
    torch.cuda.synchronize()
    del os.environ["TK_BWD_TRACE"]


def load(path):
    raw = np.fromfile(path, dtype=np.uint32)
    ctas, roles, iters, phases = raw[:4]
    return raw[4:].reshape(ctas, roles, iters, phases).astype(np.int64)


def delta(a, b):
    return (b - a) % (1 << 32)


def idle_phases(tr, lo, hi, ctas=16, step=8):
    """Where the two consumers are while neither has wgmmas in flight: the timeline of the first
    `ctas` CTAs sampled every `step` cycles over iterations lo..hi, the pairs of phases counted."""
    wg_phases = {1, 2, 7, 8, 9, 10}
    counts, samples = {}, 0
    for cta in range(min(ctas, tr.shape[0])):
        base = tr[cta, 0, lo, 0]
        lines = []
        for c in (0, 1):
            t = tr[cta, c, lo - 2:hi + 2, :]
            ok = t[:, 7] != 0
            times = delta(base, t[ok]).reshape(-1)
            times = np.where(times > (1 << 31), times - (1 << 32), times)
            ph = np.tile(np.arange(12), int(ok.sum()))
            order = np.argsort(times, kind="stable")
            lines.append((times[order], ph[order]))
        end = delta(base, tr[cta, 0, hi, 0])
        grid = np.arange(0, end, step)
        p0 = lines[0][1][np.searchsorted(lines[0][0], grid, side="right") - 1]
        p1 = lines[1][1][np.searchsorted(lines[1][0], grid, side="right") - 1]
        idle = ~np.isin(p0, list(wg_phases)) & ~np.isin(p1, list(wg_phases))
        samples += grid.size
        for a, b in zip(p0[idle], p1[idle]):
            counts[(a, b)] = counts.get((a, b), 0) + 1
    total_idle = sum(counts.values())
    print(f"\nneither consumer's wgmmas in flight: {100 * total_idle / samples:.1f}% of the samples "
          f"(first {ctas} CTAs, every {step} cycles); the phase pairs (consumer 0 / consumer 1) there:")
    print("| consumer 0 phase | consumer 1 phase | share of all samples |")
    print("|---|---|---|")
    for (a, b), n in sorted(counts.items(), key=lambda kv: -kv[1])[:10]:
        print(f"| {a}: {PHASES[a]} | {b}: {PHASES[b]} | {100 * n / samples:.1f}% |")


def analyse(tr):
    ctas = tr.shape[0]
    n_it = int((tr[0, 0, :, 0] != 0).sum())
    print(f"{ctas} CTAs, {n_it} iterations in CTA 0; SMs used: {len(set(tr[:, 3, 0, 0].tolist()))}")
    lo, hi = 20, n_it - 20  # steady iterations (the units' first and last few left out)
    for c in (0, 1):
        t = tr[:, c, lo:hi + 1, :]
        nxt = t[:, 1:, 0]
        t = t[:, :-1, :]
        it_time = delta(t[..., 0], nxt)
        # Leaves out the step between the two units (dK / dV epilogue) and iterations with no dQ
        # step (a unit's first).
        ok = (it_time < 20000) & (t[..., 7] != 0)
        print(f"\nconsumer {c}: iteration time median {np.median(it_time[ok]):.0f} cycles, "
              f"mean {it_time[ok].mean():.0f} (iterations {lo}..{hi}, all CTAs)")
        print("| phase | median cycles | mean cycles | share of mean iteration |")
        print("|---|---|---|---|")
        ends = [delta(t[..., 0], t[..., p]) for p in range(1, 12)] + [it_time]
        prev = np.zeros_like(it_time)
        for p, name in enumerate(PHASES):
            dur = ends[p] - prev
            prev = ends[p]
            x = dur[ok]
            print(f"| {p}: {name} | {np.median(x):.0f} | {x.mean():.0f} | {100 * x.mean() / it_time[ok].mean():.1f}% |")
    # Both consumers' wgmmas in flight: consumer c from stamp 1 to 3 and from 7 to 11 of each iteration.
    both = one = total = 0
    for cta in range(ctas):
        ev = []
        for c in (0, 1):
            t = tr[cta, c]
            for i in range(lo, hi):
                if t[i, 7] == 0:
                    continue
                base = t[lo, 0]
                for a, b in ((1, 3), (7, 11)):
                    ev.append((delta(base, t[i, a]), 1))
                    ev.append((delta(base, t[i, b]), -1))
        if not ev:
            continue
        ev.sort()
        start = ev[0][0]
        level, last = 0, start
        for x, dlt in ev:
            if level >= 1:
                one += x - last
            if level >= 2:
                both += x - last
            level += dlt
            last = x
        total += last - start
    print(f"\nwindow with at least one consumer's wgmmas in flight: {100 * one / total:.1f}%, "
          f"both consumers': {100 * both / total:.1f}% (iterations {lo}..{hi}, all CTAs)")
    idle_phases(tr, lo, hi)
    p = tr[:, 2, lo:hi, :]
    pw = delta(p[..., 0], p[..., 1])
    lead = delta(p[..., 1], tr[:, 0, lo:hi, 1])  # producer's loads issued -> consumer 0 past its wait
    print(f"producer: wait for a free stage median {np.median(pw):.0f} cycles, mean {pw.mean():.0f}; "
          f"loads issued to consumer 0 through its wait: median {np.median(lead):.0f}")
    span = delta(tr[:, 3, 0, 1], tr[:, 3, 0, 2])
    print(f"CTA span (start to consumer 0's exit): median {np.median(span):.0f} cycles")


if __name__ == "__main__":
    out = Path(sys.argv[1])
    patch = HERE / (sys.argv[2] if len(sys.argv) > 2 else "trace.patch")
    exts = {"trace": alloc_ab.edited_extension(
        "titankit_tk_trace", lambda name, text: fused_ab.patched(name, text, False, patch))}
    exts["main"] = build.extension()
    alloc_ab.attention_ab(exts, 2, 1.0, {"anchor": B.ATTN_SHAPES["anchor"]})
    path = out / f"{patch.stem}_anchor.bin"
    record(exts["trace"], path)
    tr = load(path)
    analyse(tr)
    np.savez_compressed(out / f"{patch.stem}_anchor_ctas0-7.npz", trace=tr[:8].astype(np.uint32))
    path.unlink()
