# Main at f4d41d6 (the FP8 GEMM's column scales through shared memory, 5i): the whole GPU suite.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/*.cu; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((585-SECONDS+T0)) python3 -m pytest -q -m gpu tests/gpu > $OUT/call1_gpu_suite.txt 2>&1; echo "suite rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call1_gpu_suite.txt
