"""Per kernel name: stream, ms/step, and how much of it runs while the compute stream is idle.

  python3 docs/perf/2026-12-01_h200_70b_layer_split/overlap.py TRACE.json.gz [TRACE2 ...]
The compute stream is the one with the most GEMM time. For kernels on other streams, 'alone' is the
part of their time when no compute-stream kernel runs (what the step waits for, if the compute stream
waits on them); compute-stream gaps are listed with the other-stream work inside them.
"""
import bisect
import collections
import gzip
import json
import os
import re
import sys

sys.path.insert(0, os.getcwd())
from trainer.profiling import kernel_category, union_intervals  # noqa: E402


def load(path):
    op = gzip.open if path.endswith(".gz") else open
    with op(path, "rt") as f:
        return json.load(f)["traceEvents"]


def covered(iv_sorted, starts, a, b):
    """Length of [a, b) covered by the sorted disjoint intervals."""
    i = max(bisect.bisect_right(starts, a) - 1, 0)
    tot = 0.0
    while i < len(iv_sorted) and iv_sorted[i][0] < b:
        s, e = iv_sorted[i]
        tot += max(0.0, min(e, b) - max(s, a))
        i += 1
    return tot


def main(path):
    ev = load(path)
    steps = [e for e in ev if e.get("ph") == "X" and re.match(r"ProfilerStep#\d+", e.get("name", ""))]
    t0 = min(e["ts"] for e in steps)
    t1 = max(e["ts"] + e["dur"] for e in steps)
    n = len(steps)
    ks = [e for e in ev if e.get("ph") == "X" and e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset")
          and t0 <= e["ts"] < t1]
    gemm_by_stream = collections.Counter()
    for e in ks:
        if kernel_category(e["name"]) == "GEMM":
            gemm_by_stream[e["args"].get("stream")] += e["dur"]
    cstream = gemm_by_stream.most_common(1)[0][0]
    comp = union_intervals((e["ts"], e["ts"] + e["dur"]) for e in ks if e["args"].get("stream") == cstream)
    starts = [s for s, _ in comp]
    rows = collections.defaultdict(lambda: [0.0, 0.0, 0, set()])
    for e in ks:
        st = e["args"].get("stream")
        r = rows[e["name"][:90]]
        r[0] += e["dur"]
        r[2] += 1
        r[3].add(st)
        if st != cstream:
            r[1] += e["dur"] - covered(comp, starts, e["ts"], e["ts"] + e["dur"])
    step_ms = (t1 - t0) / n / 1e3
    busy_c = sum(e - s for s, e in comp) / n / 1e3
    print(f"\n# {path}: {n} steps, {step_ms:.1f} ms/step; compute stream {cstream} busy {busy_c:.1f} "
          f"ms/step, idle {step_ms - busy_c:.1f}")
    print("| kernel | streams | calls/step | ms/step | ms/step with compute stream idle |\n|---|---|---|---|---|")
    for k, (d, alone, c, sts) in sorted(rows.items(), key=lambda kv: -kv[1][0])[:28]:
        print(f"| {k} | {','.join(str(s) for s in sorted(sts, key=str))} | {c / n:g} | {d / n / 1e3:.2f} | "
              f"{alone / n / 1e3:.2f} |")


if __name__ == "__main__":
    for p in sys.argv[1:]:
        main(p)
