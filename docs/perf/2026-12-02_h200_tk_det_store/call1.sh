# Deterministic TK backward: key block 0 stores its dQ blocks, no accumulator memset. The TK test
# file, the checkpoint GPU tests (TK resume), det_ab.py (2 rounds), the memset this saves, and the
# section 4 bench on the kernels as committed.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt; nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv >> $OUT/call1_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 120 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; tail -3 $OUT/call1_tests.txt
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_checkpoint_gpu.py > $OUT/call1_checkpoint_tests.txt 2>&1; tail -3 $OUT/call1_checkpoint_tests.txt
timeout 120 python3 docs/perf/2026-12-02_h200_tk_det_bwd/det_ab.py 2 anchor,8b,70b-tp8 2>&1 | tee $OUT/call1_det_ab.txt | tail -12
python3 - <<'PY' 2>&1 | tee $OUT/call1_memset.txt
# What the removed memset cost: the dQ accumulator's size at each shape, zeroed on the GPU.
import torch, triton
for name, hq in (("anchor", 64), ("8b", 32), ("70b-tp8", 8)):
    t = torch.empty(hq * 8192 * 128, dtype=torch.float32, device="cuda")
    ms = triton.testing.do_bench(lambda: t.zero_(), warmup=25, rep=200)
    print(f"{name}: dQ accumulator {t.numel() * 4 / 2**20:.0f} MiB, memset {ms * 1e3:.0f} us")
PY
timeout 150 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' 2>&1 | tee $OUT/call1_bench.txt | tail -20
