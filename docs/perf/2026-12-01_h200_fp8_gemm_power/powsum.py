"""Mean SM clock / power per A/B window: python3 session/powsum.py ab.log smi.csv"""
import sys, csv, datetime
rows = []
for line in open(sys.argv[2]):
    p = [x.strip() for x in line.split(",")]
    if len(p) < 4 or not p[0][:2].isdigit(): continue
    try:
        ts = datetime.datetime.strptime(p[0], "%Y/%m/%d %H:%M:%S.%f").replace(tzinfo=datetime.timezone.utc).timestamp()
        rows.append((ts, float(p[1].split()[0]), float(p[2].split()[0]), p[3]))
    except Exception: pass
print("| shape | impl | round | TFLOP/s | mean power W | mean SM MHz | samples |")
for line in open(sys.argv[1]):
    p = [x.strip() for x in line.strip().strip("|").split("|")]
    if len(p) < 6 or not p[4].replace(".", "").isdigit(): continue
    t0, t1 = float(p[4]), float(p[5])
    w = [r for r in rows if t0 + 0.05 <= r[0] <= t1]
    if w:
        print(f"| {p[0]} | {p[1]} | {p[2]} | {p[3]} | {sum(r[1] for r in w)/len(w):.0f} | {sum(r[2] for r in w)/len(w):.0f} | {len(w)} |")
    else:
        print(f"| {p[0]} | {p[1]} | {p[2]} | {p[3]} | - | - | 0 |")
