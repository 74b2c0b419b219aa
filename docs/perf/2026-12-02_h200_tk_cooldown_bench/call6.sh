# Deterministic vs default backward at 70B-TP8 (one KV head: neither mode pairs key blocks), then
# the TK bench's anchor and 8192^3 rows with --cooldown 3 on another machine start.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call6_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 90 python3 docs/perf/2026-12-02_h200_tk_bwd_locality/locality.py 3 8:1:8192 tk,tk-det,cudnn > $OUT/call6_locality.txt 2>&1; tail -10 $OUT/call6_locality.txt
echo "locality done at $((SECONDS-T0)) s"
timeout 150 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3' --cooldown 3 > $OUT/call6_bench.txt 2>&1; tail -14 $OUT/call6_bench.txt
echo "all done at $((SECONDS-T0)) s"
