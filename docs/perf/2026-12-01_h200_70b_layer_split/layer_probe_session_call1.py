"""Where a Llama-3 70B layer's time goes on one H200 (bf16, seq 8192, no AC, compiled block).

Times forward+backward of one compiled TransformerBlock (no FSDP) with CUDA events, then profiles
two iterations with shapes and splits the kernel time: GEMMs by (op, shapes) with their TFLOP/s, the
same GEMMs alone, attention, and the rest by kernel name. Variants: the block as the model has it,
and with fused QKV and W1|W3 projections (weights concatenated per call).
  python3 session/layer_probe.py [--variants base,fused] [--attention sdpa]
"""
import argparse
import collections
import dataclasses
import json
import os
import statistics
import sys
import tempfile
import threading
import time

import torch
import torch.nn.functional as F

sys.path.insert(0, os.getcwd())
from trainer.models.llama import TransformerBlock  # noqa: E402
from trainer.models.llama_flavors import LLAMA3_FLAVORS  # noqa: E402
from trainer.models.rope import apply_rope, rope_table  # noqa: E402
from trainer.profiling import kernel_category  # noqa: E402

S = 8192


class Clock:
    """Mean SM clock (MHz) and power (W) over a with-block, NVML read every 20 ms."""

    def __enter__(self):
        self.samples, self.stop = [], threading.Event()

        def loop():
            while not self.stop.wait(0.02):
                self.samples.append((torch.cuda.clock_rate(), torch.cuda.power_draw() / 1000))
        self.t = threading.Thread(target=loop, daemon=True)
        self.t.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.t.join()
        n = max(len(self.samples), 1)
        self.mhz = sum(s[0] for s in self.samples) / n
        self.watt = sum(s[1] for s in self.samples) / n


def fused_forward(block):
    """Block forward with wq|wk|wv and w1|w3 each as one GEMM (weights concatenated per call)."""
    att, ff = block.attention, block.feed_forward

    def attention(x, rope, doc_ids):
        b, s, _ = x.shape
        w = torch.cat([att.wq.weight, att.wk.weight, att.wv.weight])
        qkv = F.linear(x, w)
        nq, nk = att.wq.weight.shape[0], att.wk.weight.shape[0]
        q = qkv[..., :nq].view(b, s, -1, att.head_dim)
        k = qkv[..., nq:nq + nk].view(b, s, -1, att.head_dim)
        v = qkv[..., nq + nk:].view(b, s, -1, att.head_dim)
        q, k = apply_rope(q, rope), apply_rope(k, rope)
        return att.wo(att.core(q, k, v, doc_ids).reshape(b, s, -1))

    def feed_forward(x):
        h = F.linear(x, torch.cat([ff.w1.weight, ff.w3.weight]))
        a, g = h.chunk(2, dim=-1)
        return ff.w2(F.silu(a) * g)

    def forward(x, rope, doc_ids):
        h = x + attention(block.attention_norm(x), rope, doc_ids)
        return h + feed_forward(block.ffn_norm(h))
    return forward


def gemm_flops(name, dims):
    try:
        if name in ("aten::mm",):
            (m, k), (_, n) = dims[0], dims[1]
            return 2 * m * k * n
        if name == "aten::addmm":
            (m, k), (_, n) = dims[1], dims[2]
            return 2 * m * k * n
    except (ValueError, IndexError, TypeError):
        return None
    return None


def split_trace(path, iters):
    ev = json.load(open(path))["traceEvents"]
    ops = {}
    for e in ev:
        if e.get("cat") == "cpu_op" and "External id" in e.get("args", {}):
            a = e["args"]
            ops.setdefault(a["External id"], []).append((e["name"], a.get("Input Dims")))
    gemm = collections.defaultdict(lambda: [0.0, 0, None])
    other = collections.defaultdict(lambda: [0.0, 0])
    cats = collections.Counter()
    for e in ev:
        if e.get("cat") not in ("kernel", "gpu_memcpy", "gpu_memset"):
            continue
        cat = kernel_category(e["name"]) if e["cat"] == "kernel" else e["cat"]
        cats[cat] += e["dur"]
        if cat == "GEMM":
            cands = ops.get(e["args"].get("External id"), [])
            key = next(((n, json.dumps(d)) for n, d in cands if n in ("aten::mm", "aten::addmm")),
                       (e["name"][:40], "?"))
            g = gemm[key]
            g[0] += e["dur"]
            g[1] += 1
            g[2] = gemm_flops(key[0], json.loads(key[1])) if key[1] != "?" else None
        else:
            other[e["name"][:110]][0] += e["dur"]
            other[e["name"][:110]][1] += 1
    return cats, gemm, other


def lone_gemm(dims_json, reps=20):
    """ms of the mm alone, contiguous operands in the traced shapes (best of the two B layouts)."""
    d = json.loads(dims_json)
    (m, k), (_, n) = d[0], d[1]
    a = torch.randn(m, k, device="cuda", dtype=torch.bfloat16)
    best = None
    for bt in (False, True):
        b = (torch.randn(n, k, device="cuda", dtype=torch.bfloat16).t() if bt
             else torch.randn(k, n, device="cuda", dtype=torch.bfloat16))
        for _ in range(3):
            torch.mm(a, b)
        s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        for _ in range(reps):
            torch.mm(a, b)
        t.record()
        torch.cuda.synchronize()
        ms = s.elapsed_time(t) / reps
        best = ms if best is None else min(best, ms)
    return best


def run_variant(name, args, iters=10):
    torch.manual_seed(0)
    block = TransformerBlock(0, args).cuda().to(torch.bfloat16)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.02) if p.dim() > 1 else torch.nn.init.ones_(p)
    if name == "fused":
        block.forward = fused_forward(block)
    block.compile()
    rope = rope_table(args, device="cuda")[:S].unsqueeze(0)
    x = torch.randn(1, S, args.dim, device="cuda", dtype=torch.bfloat16, requires_grad=True)
    gy = torch.randn_like(x)

    def step():
        block(x, rope, None).backward(gy)

    for _ in range(3):
        step()
    torch.cuda.synchronize()
    times = []
    with Clock() as clk:
        for _ in range(iters):
            s, t = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            s.record()
            step()
            t.record()
            torch.cuda.synchronize()
            times.append(s.elapsed_time(t))
    ms = statistics.median(times)
    prof_iters = 2
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU,
                                            torch.profiler.ProfilerActivity.CUDA],
                                record_shapes=True) as prof:
        for _ in range(prof_iters):
            step()
        torch.cuda.synchronize()
    path = os.path.join(tempfile.mkdtemp(), "trace.json")
    prof.export_chrome_trace(path)
    cats, gemm, other = split_trace(path, prof_iters)
    del block, x, gy
    torch.cuda.empty_cache()
    return ms, times, clk, cats, gemm, other, prof_iters


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--variants", default="base,fused")
    ap.add_argument("--attention", default="sdpa")
    ap.add_argument("--norm", default="torch")
    ap.add_argument("--flavor", default="70B")
    a = ap.parse_args()
    args = dataclasses.replace(LLAMA3_FLAVORS[a.flavor], attention=a.attention, norm_backend=a.norm,
                               max_seq_len=S)
    print(f"# {a.flavor} block, seq {S}, bf16, compiled, no FSDP; attention {a.attention}, norm {a.norm}; "
          f"{torch.cuda.get_device_name()}, torch {torch.__version__}")
    flops = 3 * 2 * S * (args.dim * (args.n_heads + 2 * args.kv_heads) * args.head_dim
                         + args.n_heads * args.head_dim * args.dim + 3 * args.dim * args.hidden_dim)
    summary = []
    for v in a.variants.split(","):
        ms, times, clk, cats, gemm, other, n = run_variant(v, args)
        print(f"\n## {v}: fwd+bwd {ms:.2f} ms median (min {min(times):.2f}, max {max(times):.2f}); "
              f"clock {clk.mhz:.0f} MHz, {clk.watt:.0f} W; GEMM FLOPs {flops / 1e12:.2f} TFLOP")
        print("| kernel category | ms/iter |\n|---|---|")
        for c, us in cats.most_common():
            print(f"| {c} | {us / 1e3 / n:.2f} |")
        print("\n| GEMM op, input dims | calls/iter | ms/iter | TFLOP/s | lone ms | lone TFLOP/s |")
        print("|---|---|---|---|---|---|")
        tot_lone = 0.0
        for (op, dims), (us, cnt, fl) in sorted(gemm.items(), key=lambda kv: -kv[1][0]):
            per_call = us / cnt / 1e3
            lone = lone_gemm(dims) if dims != "?" else None
            if lone is not None:
                tot_lone += lone * cnt / n
            rate = f"{fl / per_call / 1e9:.0f}" if fl else "?"
            lrate = f"{fl / lone / 1e9:.0f}" if (fl and lone) else "?"
            print(f"| {op} {dims} | {cnt / n:g} | {us / 1e3 / n:.2f} | {rate} | "
                  f"{'?' if lone is None else f'{lone * cnt / n:.2f}'} | {lrate} |")
        print(f"\nGEMMs alone would take {tot_lone:.2f} ms/iter")
        print("\n| other kernel (top 15) | calls/iter | ms/iter |\n|---|---|---|")
        for k, (us, cnt) in sorted(other.items(), key=lambda kv: -kv[1][0])[:15]:
            print(f"| {k} | {cnt / n:g} | {us / 1e3 / n:.2f} |")
        summary.append((v, ms, cats.get("GEMM", 0) / 1e3 / n, tot_lone, clk.mhz, clk.watt))
    print("\n| variant | fwd+bwd ms | GEMM kernel ms | GEMMs alone ms | MHz | W |\n|---|---|---|---|---|---|")
    for v, ms, g, lone, mhz, w in summary:
        print(f"| {v} | {ms:.2f} | {g:.2f} | {lone:.2f} | {mhz:.0f} | {w:.0f} |")


if __name__ == "__main__":
    main()
