"""Instruction mix and warp-stall reasons per opcode from an Nsight Compute source-page export
(`ncu -i R --page source --csv --print-source sass`, gzipped), as quoted in docs/benchmarks.md 4d.
Usage: python3 sass_summary.py call3_tk_fwd_sass.csv.gz [rows]"""
import collections
import csv
import gzip
import sys

# Integer, address, move and predicate opcodes (vector and uniform datapath): the "integer and
# address instructions" of docs/benchmarks.md 4d.
INTEGER = {"IMAD", "IADD3", "VIADD", "LOP3", "ISETP", "SHF", "LEA", "SEL", "MOV", "R2UR", "S2R",
           "S2UR", "CS2R", "PLOP3", "P2R", "R2P", "IMNMX", "IABS", "UIADD3", "UMOV", "ULOP3",
           "UISETP", "ULEA", "USHF", "USEL", "UIMAD", "UPLOP3"}


def main():
    path, n = sys.argv[1], int(sys.argv[2]) if len(sys.argv) > 2 else 12
    with gzip.open(path, "rt") as f:
        r = csv.reader(f)
        next(r)  # the kernel-name line
        head = next(r)
        rows = list(r)
    src, ex = head.index("Source"), head.index("Instructions Executed")
    reasons = {h: i for i, h in enumerate(head) if h.startswith("stall_") and "Not Issued" not in h}
    inst, stalls = collections.Counter(), collections.defaultdict(collections.Counter)
    for row in rows:
        words = row[src].split()
        if not words:
            continue
        op = (words[1] if words[0].startswith("@") else words[0]).split(".")[0]
        inst[op] += int(row[ex] or 0)
        for h, i in reasons.items():
            stalls[op][h[6:]] += int(row[i] or 0)
    n_inst = sum(inst.values())
    n_samp = sum(sum(c.values()) for c in stalls.values())
    total = collections.Counter()
    for c in stalls.values():
        total.update(c)
    print(f"{path}: {n_inst:,} instructions, {n_samp:,} warp samples:",
          ", ".join(f"{k} {100 * v / n_samp:.0f}%" for k, v in total.most_common(6)))
    n_int = sum(v for op, v in inst.items() if op in INTEGER)
    n_uni = sum(v for op, v in inst.items() if op in INTEGER and op.startswith("U"))
    print(f"integer and address instructions: {100 * n_int / n_inst:.1f}% "
          f"({100 * n_uni / n_inst:.1f}% on the uniform datapath)")
    print("| opcode | % of instructions | % of samples | top stall reasons (% of all samples) |")
    print("|---|---|---|---|")
    for op, c in sorted(stalls.items(), key=lambda kv: -sum(kv[1].values()))[:n]:
        s = sum(c.values())
        top = ", ".join(f"{k} {100 * v / n_samp:.1f}" for k, v in c.most_common(3))
        print(f"| {op} | {100 * inst[op] / n_inst:.1f} | {100 * s / n_samp:.1f} | {top} |")


if __name__ == "__main__":
    main()
