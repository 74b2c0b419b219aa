import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
t = [r["throughput(tps)"] for r in rows[-5:]]
m = rows[-1]
print(f"{sys.argv[1].split('/')[-1]}: tps last5 mean {sum(t)/len(t):,.0f} (min {min(t):,.0f} max {max(t):,.0f}) max_active {m['memory/max_active(GiB)']:.2f} GiB")
