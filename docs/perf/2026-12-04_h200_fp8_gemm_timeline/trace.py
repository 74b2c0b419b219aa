"""clock64 counters in main's FP8 GEMM (a text-edited build, timed nowhere else): per consumer
warpgroup, the SM clocks its thread 0 spent waiting for full stages, in the deferred stores
(`store_out`), draining its last slice's wgmmas (mma_async_wait<0>) and in the rest of the
epilogue (scales, stream-K add, scaling, rounding) up to the next unit's first wait. Every
consumer's thread 0 stores its counters to a __device__ array at the end of each launch (plain
stores: a printf in the kernel made ptxas serialise the wgmmas, C7510); an added binding copies
them out after the 20th and the 21st launch per shape. Builds: main, then each variant of ab.py
named in the second argument with the same counters.

  python3 docs/perf/2026-12-04_h200_fp8_gemm_timeline/trace.py [shapes] [set:variant,...]
"""
import importlib.util
import sys
from pathlib import Path

import torch

from kernels.fp8 import reference as R
from kernels.thunderkittens import build, ops

_spec = importlib.util.spec_from_file_location(
    "store_shadow_ab", Path(__file__).resolve().parent / "ab.py")
ab = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(ab)
lib = ab.lib

EDITS = [  # (old, new): each old text occurs once in main's GEMM
    ("using namespace kittens;\n",
     "using namespace kittens;\n__device__ long long probe_data[132][2][8];\n"),
    ("    warpgroup::increase_registers<232>();\n",
     "    warpgroup::increase_registers<232>();\n"
     "    long long p_t0 = clock64(), p_full = 0, p_store = 0, p_drain = 0, p_epi = 0, p_end = 0;\n"
     "    int p_units = 0, p_slices = 0;\n"),
    ("            wait(full[s], (it / STAGES) & 1);\n",
     "            { const long long p_a = clock64(); wait(full[s], (it / STAGES) & 1);"
     " p_full += clock64() - p_a; p_slices++; }\n"),
    ("if (kk == store_at && out_mn.x >= 0) store_out();",
     "if (kk == store_at && out_mn.x >= 0) { const long long p_a = clock64(); store_out();"
     " p_store += clock64() - p_a; }"),
    ("        float sa0 = 0.f, sa1 = 0.f, sb0 = 0.f, sb1 = 0.f;\n",
     "        p_end = clock64();\n        float sa0 = 0.f, sa1 = 0.f, sb0 = 0.f, sb1 = 0.f;\n"),
    ("        warpgroup::mma_async_wait<0>();\n        warp::arrive(empty[prev]);\n",
     "        warpgroup::mma_async_wait<0>();\n        warp::arrive(empty[prev]);\n"
     "        { const long long p_a = clock64(); p_drain += p_a - p_end; p_end = p_a; }\n"),
    ("        out_mn = mn;\n", "        out_mn = mn;\n        p_epi += clock64() - p_end; p_units++;\n"),
    ("    if (out_mn.x >= 0) store_out();\n",
     "    if (out_mn.x >= 0) store_out();\n"
     "    if (tid == 0 && blockIdx.x < 132) {\n"
     "        long long* d = probe_data[blockIdx.x][wg];\n"
     "        d[0] = p_units, d[1] = p_slices, d[2] = clock64() - p_t0, d[3] = p_full;\n"
     "        d[4] = p_store, d[5] = p_drain, d[6] = p_epi;\n"
     "    }\n"),
    ("}  // namespace fp8gemm\n",
     "}  // namespace fp8gemm\n"
     "void fp8_probe_read(long long* out) {\n"
     "    detail::check_cuda(cudaMemcpyFromSymbol(out, ::probe_data, sizeof(::probe_data)),"
     " \"probe_data\");\n}\n"),
]
OTHER_EDITS = {  # file -> (old, new)
    "tk_kernels.h": ("Fp8GemmWorkspace fp8_gemm_rowwise_workspace(int m, int n, int k);\n",
                     "Fp8GemmWorkspace fp8_gemm_rowwise_workspace(int m, int n, int k);\n"
                     "void fp8_probe_read(long long* out);\n"),
    "binding.cpp": ("PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n",
                    "PYBIND11_MODULE(TORCH_EXTENSION_NAME, m) {\n"
                    "    m.def(\"fp8_probe_read\", []() {\n"
                    "        auto t = torch::empty({132, 2, 8}, torch::kInt64);\n"
                    "        titankit_tk::fp8_probe_read(reinterpret_cast<long long*>(t.data_ptr<int64_t>()));\n"
                    "        return t;\n"
                    "    });\n"),
}


def edit(t):
    for old, new in EDITS:
        t = ab._sub(t, old, new)
    return t


def edit_file(f, t, variant, head):
    if f == lib.GEMM:
        return edit(variant(head))
    if f in OTHER_EDITS:
        return ab._sub(t, *OTHER_EDITS[f])
    return t


def summary(label, shape, launch, d):
    """One table row: means over the consumers that ran units (and the spread of the total)."""
    d = d[d[:, :, 0] > 0].double()  # (consumers, 8)
    tot = d[:, 2]
    f = lambda i: (d[:, i] / tot).mean().item() * 100
    per_slice = ((tot - d[:, 3] - d[:, 4] - d[:, 5] - d[:, 6]) / d[:, 1]).mean().item()
    print(f"| {label} | {shape} | {launch} | {len(d)} | {tot.mean().item() / 1e6:.3f} "
          f"({tot.min().item() / 1e6:.3f}-{tot.max().item() / 1e6:.3f}) | {d[:, 1].mean().item():.0f} | "
          f"{f(3):.1f} | {f(4):.1f} | {f(5):.1f} | {f(6):.1f} | {per_slice:.0f} |", flush=True)


if __name__ == "__main__":
    names = sys.argv[1].split(",") if len(sys.argv) > 1 else ["8192^3", "8B w1/w3"]
    builds = {"main": ("titankit_tk_gemm_probe", lambda t: t)}
    for spec in (sys.argv[2].split(",") if len(sys.argv) > 2 and sys.argv[2] else []):
        group, name = spec.split(":")
        ext_name, variant = ab.SETS[group][name]
        builds[name] = (ext_name + "_probe", variant)
    head = lib.main_text()
    print("| build | shape | launch | consumers | M clocks per consumer (min-max) | K slices | "
          "% waiting for full stages | % in stores | % draining the last slice | % rest of epilogue | "
          "clocks per K slice, rest |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for label, (ext_name, variant) in builds.items():
        ext = lib.alloc_ab.edited_extension(
            ext_name, lambda f, t, v=variant: edit_file(f, t, v, head))
        build._EXTENSION = ext
        for shape in names:
            m, n, k = lib.SHAPES[shape]
            g = torch.Generator(device="cuda").manual_seed(0)
            qx, sx = R.quantize_rowwise(torch.randn(m, k, device="cuda", generator=g))
            qw, sw = R.quantize_rowwise(torch.randn(n, k, device="cuda", generator=g) * 0.02)
            for launch in range(1, 22):
                ops.fp8_gemm_rowwise(qx, qw, sx, sw.reshape(1, n))
                if launch >= 20:
                    torch.cuda.synchronize()
                    summary(label, shape, launch, ext.fp8_probe_read())
