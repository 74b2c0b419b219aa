"""Per step: the range of a baseline group's losses, and how many runs of each other group lie
outside it (and by how much, relative to the nearer edge), summed over ranges of steps.

    python3 docs/perf/2026-12-05_h200_session50/envelope.py sdpa=A.jsonl,B.jsonl tk=C.jsonl,... triton=...

The first group is the baseline. Pairwise maxima (curves.py) mix two things: how far a group's
runs are from the baseline's and how far the baseline's own runs scatter; this counts the steps at
which a run falls outside everything the baseline's runs did.
"""
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "scripts"))
import compare_losses as cl  # noqa: E402

RANGES = [("steps 1-12", 1, 12), ("steps 13-27", 13, 27), ("steps 28-35", 28, 35),
          ("steps 36-50", 36, 50)]


def losses(path):
    return {r["step"]: r["loss_metrics/global_avg_loss"] for r in cl.read_metrics(Path(path))}


def main(argv):
    groups = {}
    for arg in argv:
        label, files = arg.split("=", 1)
        groups[label] = [losses(f) for f in files.split(",")]
    (base_label, base), *others = groups.items()
    print(f"| steps | {base_label}: range of its {len(base)} runs, relative | "
          + " | ".join(f"{lab}: run-steps outside it (largest distance)" for lab, _ in others) + " |")
    print("|---|---|" + "---|" * len(others))
    for name, lo, hi in RANGES:
        width = max((max(r[s] for r in base) - min(r[s] for r in base)) / min(r[s] for r in base)
                    for s in range(lo, hi + 1))
        cells = []
        for _, runs in others:
            n, far = 0, 0.0
            for s in range(lo, hi + 1):
                bl, bh = min(r[s] for r in base), max(r[s] for r in base)
                for r in runs:
                    if r[s] < bl or r[s] > bh:
                        n += 1
                        far = max(far, (bl - r[s]) / bl if r[s] < bl else (r[s] - bh) / bh)
            cells.append(f"{n} of {len(runs) * (hi - lo + 1)} ({far:.1e})")
        print(f"| {name} | up to {width:.1e} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(sys.argv[1:])
