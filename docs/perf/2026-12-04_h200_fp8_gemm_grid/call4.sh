# Call 4: the new plan (main's GEMM with make_plan changed): the TK and FP8 GPU tests, then the
# acceptance bench of issue 10.   bash docs/perf/2026-12-04_h200_fp8_gemm_grid/call4.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call4_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
tail -2 $OUT/call4_tests.txt
timeout 200 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call4_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call4_bench.txt
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py > $OUT/call4_fp8_tests.txt 2>&1; echo "fp8 tests rc $? at $((SECONDS-T0)) s"
tail -2 $OUT/call4_fp8_tests.txt
