"""Pairwise loss-curve spreads of 50-step runs, the table of docs/benchmarks.md section 7:

    python3 docs/perf/2026-12-04_h200_tk_loss_curves_slack8/curves.py sdpa=A.jsonl,B.jsonl tk=C.jsonl,...

For every pair of runs (within a group, and across two groups) the largest relative loss difference
(scripts/compare_losses.compare: |b - a| / |a|) in each range of steps, and the relative difference
of the two runs' mean loss over steps 46-50; each cell gives the smallest and largest over the pairs.
Also each run's tokens/s after 5 warm-up steps (compare_losses.steady_tps).
"""
import itertools
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import compare_losses as cl  # noqa: E402

RANGES = [("step 1", 1, 1), ("steps 1-27", 1, 27), ("step 28", 28, 28), ("steps 29-40", 29, 40),
          ("steps 41-50", 41, 50)]


def cells(pairs):
    out = {}
    for a, b in pairs:
        c = cl.compare(a, b)
        for name, lo, hi in RANGES:
            out.setdefault(name, []).append(max(c["rel"][s] for s in c["steps"] if lo <= s <= hi))
        ma = sum(c["a"][s] for s in range(46, 51)) / 5
        mb = sum(c["b"][s] for s in range(46, 51)) / 5
        out.setdefault("mean of steps 46-50", []).append(abs(mb - ma) / abs(ma))
    return {k: (f"{min(v):.1e} - {max(v):.1e}" if len(v) > 1 else f"{v[0]:.1e}") + f" ({len(v)})"
            for k, v in out.items()}


def main(argv):
    groups = {}
    for arg in argv:
        label, files = arg.split("=", 1)
        groups[label] = [(f, cl.read_metrics(Path(f))) for f in files.split(",")]
    for label, runs in groups.items():
        for f, rows in runs:
            mean = sum(r["loss_metrics/global_avg_loss"] for r in rows if 46 <= r["step"] <= 50) / 5
            print(f"{label} {Path(f).name}: mean of steps 46-50 {mean:.4f}, "
                  f"tokens/s after 5 steps {cl.steady_tps(rows, 5):,.0f}")
    columns = {}
    for label, runs in groups.items():
        columns[f"{label} vs {label}"] = cells(itertools.combinations([r for _, r in runs], 2))
    for (la, ra), (lb, rb) in itertools.combinations(groups.items(), 2):
        columns[f"{la} vs {lb}"] = cells(itertools.product([r for _, r in ra], [r for _, r in rb]))
    columns = {k: v for k, v in columns.items() if v}
    print("\n| largest relative loss difference | " + " | ".join(columns) + " |")
    print("|---|" + "---|" * len(columns))
    for name in [r[0] for r in RANGES] + ["mean of steps 46-50"]:
        print(f"| {name} | " + " | ".join(v.get(name, "") for v in columns.values()) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
