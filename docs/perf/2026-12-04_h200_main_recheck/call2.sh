# Call 2 (session 41): the TK test file and the acceptance bench of issue 10 on main.
#   bash docs/perf/2026-12-04_h200_main_recheck/call2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 200 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call2_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
tail -2 $OUT/call2_tests.txt
timeout 280 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call2_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
cat $OUT/call2_bench.txt
