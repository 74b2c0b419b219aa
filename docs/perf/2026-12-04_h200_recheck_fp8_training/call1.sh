# Call 1: main re-checked on the GPU (the TK and FP8 GPU tests in full, the acceptance bench of
# issue 10), then the per-kernel times of the TK attention step.
#   bash docs/perf/2026-12-04_h200_recheck_fp8_training/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_recheck_fp8_training
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_tests.txt
timeout 150 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call1_bench.txt
timeout 40 python3 $D/kernel_times.py anchor 20 > $OUT/call1_kernel_times.txt 2>&1; echo "kernel times rc $? at $((SECONDS-T0)) s"
cat $OUT/call1_kernel_times.txt | grep -v "^$"
timeout $((570 - (SECONDS-T0))) python3 -m pytest -q -m gpu tests/gpu/test_fp8_gpu.py > $OUT/call1_fp8_tests.txt 2>&1; echo "fp8 tests rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_fp8_tests.txt
