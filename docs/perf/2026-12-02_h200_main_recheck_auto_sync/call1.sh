# Main at 20966d7 (auto grad sync the default) on one H200: build the TK extension, then the whole GPU suite.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call1_smi.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 520 python3 -m pytest -q -m gpu tests/gpu -rsx > $OUT/call1_gpu_suite.txt 2>&1; echo "suite rc $?"
tail -8 $OUT/call1_gpu_suite.txt
echo "all done at $((SECONDS-T0)) s"
