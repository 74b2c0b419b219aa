# kernels/thunderkittens/gpu_check.sh as a user runs it (build cached: same machine start).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
T0=$SECONDS
timeout 560 bash kernels/thunderkittens/gpu_check.sh > $OUT/call3_gpu_check.txt 2>&1; echo "rc $?"; tail -22 $OUT/call3_gpu_check.txt
echo "all done at $((SECONDS-T0)) s"
