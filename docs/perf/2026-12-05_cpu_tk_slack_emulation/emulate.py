"""CPU emulation of the ThunderKittens forward's online softmax (attention_fwd_sm90.cu at 25eb6a5):
does RESCALE_SLACK = 8 (4zi) explain TK's larger out error than cuDNN's at peaked scores?

    OMP_NUM_THREADS=1 python3 docs/perf/2026-12-05_cpu_tk_slack_emulation/emulate.py [--quick]

An emulation of the algorithm's rounding in torch on the CPU, not a GPU measurement. Per (batch,
head), all query rows at once, key blocks of 128 in order, causal (README.md has the algorithm with
the kernel's line numbers):
  S      = fp32 matmul of the bf16 q, k (products exact in fp32; torch's summation order, not wgmma's)
  mx     = max(m_old, rowmax of the block's visible S);  ms = fp32(mx * sl2), mos = fp32(m_old * sl2)
  slack  : if ms - mos <= SLACK the row keeps m_old (ms = mos)                       [kernel 93-96]
  corr   = exp2(mos - ms)                                                           [kernel 97]
  P      = exp2(fma(S, sl2, -ms)) in fp32 (fma: the product in float64, exact, then one rounding),
           0 where masked                                                          [kernel 104-105]
  l      = fma(l, corr, rowsum_fp32(P))                     (P in fp32, not bf16)  [kernel 106, 116]
  O      = O * corr + bf16(P) @ bf16(V)  (fp32 matmul of the bf16-rounded operands) [kernel 331, 339-340]
  out    = bf16_rn(O / l) (fp32 division);  lse = fp32(fp32(fma(m, sl2, log2 l)) * LN2) [226-227, 240-249]
exp2 and log2 are torch's fp32 ones (about correctly rounded), not ex2.approx / lg2.approx (relative
error ~2^-22, 2^13 times below bf16's 2^-9: not emulated).

Variants (name: slack, P in P V, l from):
  always        no slack: m = max(m_old, block max) always, as flash kernels do (cuDNN, FA3)
  slack8        the kernel as it is (RESCALE_SLACK = 8)
  slack0        the kernel's code path with RESCALE_SLACK = 0
  slack8_lbf16  slack 8, l summed from the bf16 P that P V multiplies (candidate fix); lse from that l too
  slack8_lbf16o slack 8, out divided by the bf16 P's sum, lse from the fp32 P's sum (two sums kept)
  always_lbf16  no slack, l from the bf16 P
  slack8_pfp32  slack 8, P V with P unrounded (fp32): isolates P's bf16 rounding
  slack1/2/4    the kernel's code path with RESCALE_SLACK = 1, 2, 4 (accuracy only; speed is the GPU's)
Reference: float64 softmax attention of the same bf16 inputs (out in float64, as accuracy.py's fp32).
dq: an emulation of the TK backward's dq path (attention_bwd_sm90.cu: delta = fp32 rowsum(dO * out_bf16),
P = exp2(fma(S, sl2_bwd, -fp32(lse * LOG2E))), dS = P * (dP - delta) in fp32, rounded to bf16,
dq = bf16(fp32(dS_bf16 @ K) * scale)) fed with each variant's bf16 out and fp32 lse; the backward's own
roundings are the same for every variant, so dq's ratio to `always` isolates the forward's share.
Reference dq: float64 (autograd's formula on the float64 out and lse).
Error metric (accuracy.py's `rel`): ||got - ref||_F / ||ref||_F over the whole (B, S, H, D) tensor.
"""

from __future__ import annotations

import math
import os
import sys
import time

os.environ.setdefault("OMP_NUM_THREADS", "1")
import torch  # noqa: E402

torch.set_num_threads(1)
# fp32 matmuls must be plain fp32 (no TF32 / bf16 reduced-precision paths)
assert torch.get_float32_matmul_precision() == "highest"

F32, F64, BF = torch.float32, torch.float64, torch.bfloat16
LOG2E = torch.tensor(1.4426950408889634, dtype=F32)   # constexpr float LOG2E (attention_common.cuh)
LN2 = torch.tensor(0.6931471805599453, dtype=F32)
D = 128
KV_ROWS = 128
SL2_FWD = (LOG2E / torch.sqrt(torch.tensor(float(D), dtype=F32))).to(F32)  # fwd line 209
SCALE_BWD = (1.0 / torch.sqrt(torch.tensor(float(D), dtype=F32))).to(F32)   # bwd line 460 (rsqrtf)
SL2_BWD = (SCALE_BWD * LOG2E).to(F32)

VARIANTS = {  # name: (slack or None, round P to bf16 for P V, l from the bf16 P)
    "always": (None, True, False),
    "slack8": (8.0, True, False),
    "slack0": (0.0, True, False),
    "slack8_lbf16": (8.0, True, True),
    "slack8_lbf16o": (8.0, True, "out"),
    "always_lbf16": (None, True, True),
    "slack8_pfp32": (8.0, False, False),
    "slack1": (1.0, True, False),
    "slack2": (2.0, True, False),
    "slack4": (4.0, True, False),
}


def fma32(a, b, c):
    """fp32 fma(a, b, c): a * b exact in float64 (24 + 24 bits), the sum rounded there, then to fp32."""
    return (a.to(F64) * b.to(F64) + c.to(F64)).to(F32)


def bf(x):
    return x.to(BF).to(F32)


def tk_forward(q, k, v, slack, p_bf16, l_bf16):
    """One (batch, head): q (S, D), k, v (S, D) fp32 holding bf16 values; causal. Returns bf16 out as
    fp32, fp32 lse, and per row whether its maximum ever lagged (a block max above m was not taken)
    and its final m."""
    s_len = q.shape[0]
    m = torch.full((s_len,), -math.inf, dtype=F32)
    l = torch.zeros(s_len, dtype=F32)
    l32 = torch.zeros(s_len, dtype=F32)
    o = torch.zeros(s_len, D, dtype=F32)
    lagged = torch.zeros(s_len, dtype=torch.bool)
    rows_all = torch.arange(s_len)
    for i in range((s_len + KV_ROWS - 1) // KV_ROWS):
        c0 = i * KV_ROWS
        r0 = c0  # causal: rows before the block see none of it (the kernel never visits it, or
        # visits it fully masked, which is a no-op: m kept, corr 1, P 0)
        rows = rows_all[r0:]
        cols = torch.arange(c0, min(c0 + KV_ROWS, s_len))
        vis = cols[None, :] <= rows[:, None]
        sb = q[r0:] @ k[c0:c0 + len(cols)].T  # fp32
        mo = m[r0:]
        mx = torch.maximum(mo, sb.masked_fill(~vis, -math.inf).amax(1))
        mos, ms = (mo * SL2_FWD).to(F32), (mx * SL2_FWD).to(F32)
        if slack is not None:
            keep = (ms - mos) <= slack
            lagged[r0:] |= keep & (mx > mo)
            mx = torch.where(keep, mo, mx)
            ms = torch.where(keep, mos, ms)
        corr = torch.exp2(mos - ms)  # 0 on the first block (mos = -inf)
        p = torch.exp2(fma32(sb, SL2_FWD, -ms[:, None])).masked_fill(~vis, 0.0)
        pv = bf(p) if p_bf16 else p
        rs = (pv if l_bf16 else p).sum(1, dtype=F32)
        l[r0:] = fma32(l[r0:], corr, rs)
        if l_bf16 == "out":  # out / sum of bf16 P, lse from the fp32 P's sum
            rs32 = p.sum(1, dtype=F32)
            l32[r0:] = fma32(l32[r0:], corr, rs32)
        o[r0:] = o[r0:] * corr[:, None] + pv @ v[c0:c0 + len(cols)]
        m[r0:] = mx
    out = bf(o / l[:, None])
    lse = (fma32(m, SL2_FWD, torch.log2(l32 if l_bf16 == "out" else l)) * LN2).to(F32)
    return out, lse, lagged, m


def ref_forward(q, k, v):
    """float64 causal softmax attention: out, lse (natural), P, and the row maxima of S."""
    s_len = q.shape[0]
    s = (q.to(F64) @ k.to(F64).T) / math.sqrt(D)
    s = s.masked_fill(torch.ones(s_len, s_len, dtype=torch.bool).triu(1), -math.inf)
    lse = torch.logsumexp(s, 1)
    p = torch.exp(s - lse[:, None])
    return p @ v.to(F64), lse, p


def tk_dq(q, k, v, do, out, lse, s32, dp32, mask):
    """The TK backward's dq path (attention_bwd_sm90.cu) on this variant's bf16 out and fp32 lse."""
    delta = (do * out).sum(1, dtype=F32)                      # prep_kernel, fp32
    lse2 = (lse * LOG2E).to(F32)
    p = torch.exp2(fma32(s32, SL2_BWD, -lse2[:, None])).masked_fill(mask, 0.0)
    ds = bf(p * (dp32 - delta[:, None]))
    return bf((ds @ k) * SCALE_BWD)


def ref_dq(k, v, do, out64, p64):
    dp = do.to(F64) @ v.to(F64).T
    delta = (do.to(F64) * out64).sum(1, keepdim=True)
    return (p64 * (dp - delta)) @ k.to(F64) / math.sqrt(D)


def case(b, s_len, hq, hkv, scale, seed):
    """accuracy.py's case() inputs (CPU generator: other numbers, the same distribution)."""
    g = torch.Generator().manual_seed(seed)
    mk = lambda *sh: torch.randn(*sh, generator=g)  # noqa: E731
    q = (mk(b, s_len, hq, D) * scale).to(BF)
    k = (mk(b, s_len, hkv, D) * scale).to(BF)
    v = mk(b, s_len, hkv, D).to(BF)
    do = mk(b, s_len, hq, D).to(BF)
    sums = {name: dict(out=0.0, dq=0.0, lse_sq=0.0, lse_max=0.0) for name in VARIANTS}
    ref_n = dict(out=0.0, dq=0.0)
    n_rows = 0
    stats = dict(lag_rows=0, final_lag_rows=0, top_w=0.0, dom_p=[], lagged_eq=True, a_vs_c=0.0,
                 a_vs_c_lse=0.0, lagged_frac_diff=0.0)
    mask = torch.ones(s_len, s_len, dtype=torch.bool).triu(1)
    for bi in range(b):
        for h in range(hq):
            hk = h // (hq // hkv)
            qh, kh, vh = (t[bi, :, hh].float() for t, hh in ((q, h), (k, hk), (v, hk)))
            doh = do[bi, :, h].float()
            out64, lse64, p64 = ref_forward(qh, kh, vh)
            dq64 = ref_dq(kh, vh, doh, out64, p64)
            ref_n["out"] += out64.pow(2).sum().item()
            ref_n["dq"] += dq64.pow(2).sum().item()
            s32 = qh @ kh.T
            dp32 = doh @ vh.T
            res = {}
            for name, (slack, p_bf16, l_bf16) in VARIANTS.items():
                out, lse, lagged, m = tk_forward(qh, kh, vh, slack, p_bf16, l_bf16)
                dq = tk_dq(qh, kh, vh, doh, out, lse, s32, dp32, mask)
                res[name] = (out, lse, lagged, m)
                e = sums[name]
                e["out"] += (out.to(F64) - out64).pow(2).sum().item()
                e["dq"] += (dq.to(F64) - dq64).pow(2).sum().item()
                dl = (lse.to(F64) - lse64).abs()
                e["lse_sq"] += dl.pow(2).sum().item()
                e["lse_max"] = max(e["lse_max"], dl.max().item())
            n_rows += s_len
            # Sanity 1: always and slack0 (slack 0 keeps m only when ms == mos: the same ms).
            stats["a_vs_c"] = max(stats["a_vs_c"], (res["always"][0] - res["slack0"][0]).abs().max().item())
            stats["a_vs_c_lse"] = max(stats["a_vs_c_lse"],
                                      (res["always"][1] - res["slack0"][1]).abs().max().item())
            # Sanity 2: rows whose maximum never lagged under slack 8 are bitwise always's.
            lag = res["slack8"][2]
            same = (res["slack8"][0] == res["always"][0]).all(1) & (res["slack8"][1] == res["always"][1])
            stats["lagged_eq"] &= bool(same[~lag].all())
            stats["lag_rows"] += int(lag.sum())
            true_max = (s32.masked_fill(mask, -math.inf)).amax(1)
            m8 = res["slack8"][3]
            fl = m8 < true_max
            stats["final_lag_rows"] += int(fl.sum())
            # the dominant term's P in the kernel's units: 2^(fp32(max sl2) - fp32(m sl2))
            dom = torch.exp2((true_max * SL2_FWD).to(F32) - (m8 * SL2_FWD).to(F32))
            stats["dom_p"].append(dom[fl])
            stats["top_w"] += p64.amax(1).sum().item()
    errs = {name: dict(out=math.sqrt(e["out"] / ref_n["out"]), dq=math.sqrt(e["dq"] / ref_n["dq"]),
                       lse_rms=math.sqrt(e["lse_sq"] / n_rows), lse_max=e["lse_max"])
            for name, e in sums.items()}
    dom = torch.cat(stats["dom_p"]) if stats["dom_p"] else torch.zeros(0)
    stats.update(n_rows=n_rows, top_w=stats["top_w"] / n_rows,
                 dom_med=float(dom.median()) if dom.numel() else float("nan"))
    del stats["dom_p"]
    return errs, stats


def main() -> None:
    quick = "--quick" in sys.argv
    b, s_len, hq, hkv = 1, 2048, 4, 1
    if quick:
        s_len, hq = 512, 2
    seeds = (0, 1, 2)
    scales = (1.0, 2.0, 3.0)
    t0 = time.time()
    print(f"# torch {torch.__version__}, threads {torch.get_num_threads()}; B {b}, S {s_len}, "
          f"Hq/Hkv {hq}/{hkv}, D {D}, causal; seed = S + Hq + int(10 scale) + 1000 i (accuracy.py's "
          f"formula at this size, plus 1000 i), i = {seeds}")
    all_errs = {}
    ok = True
    for scale in scales:
        for i in seeds:
            seed = s_len + hq + int(10 * scale) + 1000 * i
            errs, st = case(b, s_len, hq, hkv, scale, seed)
            all_errs[(scale, i)] = errs
            ok &= st["a_vs_c"] == 0 and st["lagged_eq"]
            print(f"scale {scale:g} seed {seed}: rows lagging at some step {st['lag_rows'] / st['n_rows']:.1%},"
                  f" at the end {st['final_lag_rows'] / st['n_rows']:.1%} (median dominant P there "
                  f"{st['dom_med']:.3g}); mean top softmax weight {st['top_w']:.3f}; "
                  f"|always - slack0| out {st['a_vs_c']:.1e} lse {st['a_vs_c_lse']:.1e}; "
                  f"non-lagging rows of slack8 bitwise always's: {st['lagged_eq']}; "
                  f"{time.time() - t0:.0f} s", flush=True)
            for name, e in errs.items():
                print(f"    {name:13s} out {e['out']:.3e} dq {e['dq']:.3e} lse rms {e['lse_rms']:.2e} "
                      f"max {e['lse_max']:.2e}")
    print(f"\nsanity (always == slack0 bitwise, non-lagging rows of slack8 == always bitwise): "
          f"{'PASS' if ok else 'FAIL'}")
    print(f"\n| q, k scale | variant | out err (mean of {len(seeds)} seeds) | out / always (per seed) "
          f"| dq err | dq / always (per seed) | lse err rms / max (nats) |")
    print("|---|---|---|---|---|---|---|")
    for scale in scales:
        for name in VARIANTS:
            es = [all_errs[(scale, i)][name] for i in seeds]
            bs = [all_errs[(scale, i)]["always"] for i in seeds]
            ro = [e["out"] / a["out"] for e, a in zip(es, bs)]
            rq = [e["dq"] / a["dq"] for e, a in zip(es, bs)]
            mean = lambda xs: sum(xs) / len(xs)  # noqa: E731
            print(f"| {scale:g} | {name} | {mean([e['out'] for e in es]):.3e} | {mean(ro):.3f} "
                  f"({', '.join(f'{r:.3f}' for r in ro)}) | {mean([e['dq'] for e in es]):.3e} | "
                  f"{mean(rq):.3f} ({', '.join(f'{r:.3f}' for r in rq)}) | "
                  f"{mean([e['lse_rms'] for e in es]):.1e} / {max(e['lse_max'] for e in es):.1e} |")
    print(f"\n# {time.time() - t0:.0f} s")


if __name__ == "__main__":
    main()
