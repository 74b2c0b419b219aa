# The bench's deterministic row (first GPU run of --deterministic), then the NaN-fill A/B.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_det_fill
date -u > $OUT/call1_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call1_smi.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 300 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '' --cooldown 3 --deterministic > $OUT/call1_bench_det.txt 2>&1; tail -16 $OUT/call1_bench_det.txt
echo "bench done at $((SECONDS-T0)) s"
timeout 200 python3 $D/det_fill.py 3 3 anchor,8b,70b-tp8 > $OUT/call1_det_fill.txt 2>&1; tail -14 $OUT/call1_det_fill.txt
echo "all done at $((SECONDS-T0)) s"
