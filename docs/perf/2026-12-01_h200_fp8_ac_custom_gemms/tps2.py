import json, sys, statistics as st
rows = [json.loads(l) for l in open(sys.argv[1])]
skip = int(sys.argv[2]) if len(sys.argv) > 2 else 5
t = [r["throughput(tps)"] for r in rows[skip:]]
m = rows[-1]
print(f"{sys.argv[1].split('/')[-1]}: steps {skip+1}-{len(rows)} tps median {st.median(t):,.0f} mean {st.mean(t):,.0f} (min {min(t):,.0f} max {max(t):,.0f}) max_active {m['memory/max_active(GiB)']:.2f} reserved {m['memory/max_reserved(GiB)']:.2f} GiB retries {m.get('memory/num_alloc_retries')}")
