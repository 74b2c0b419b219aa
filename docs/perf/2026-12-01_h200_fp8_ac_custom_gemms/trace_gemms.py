"""FP8 GEMM kernels (in order) and the largest idle gaps of a saved rank-0 trace."""
import gzip, json, sys
ev = json.load(gzip.open(sys.argv[1]))["traceEvents"]
ks = sorted((e for e in ev if e.get("cat") == "kernel"), key=lambda e: e["ts"])
out = []
for e in ks:
    n = e["name"]
    if "qqtst" in n or "fp8gemm::gemm_kernel" in n or "_fp8_gemm_kernel" in n:
        a = e.get("args", {})
        out.append((n[:60], round(e["dur"], 1), str(a.get("grid")), e["ts"]))
print("n_fp8_gemm", len(out), "sum_us", round(sum(o[1] for o in out), 1))
for o in out:
    print("G", o[0], o[1], o[2])
gaps = []
end = ks[0]["ts"] + ks[0]["dur"]
prev = ks[0]["name"]
for e in ks[1:]:
    if e["ts"] > end:
        gaps.append((e["ts"] - end, prev[:50], e["name"][:50]))
    if e["ts"] + e["dur"] > end:
        end, prev = e["ts"] + e["dur"], e["name"]
gaps.sort(reverse=True)
print("idle_total_us", round(sum(g[0] for g in gaps), 1), "n_gaps", len(gaps))
for g in gaps[:25]:
    print("GAP", round(g[0], 1), "|", g[1], "->", g[2])
