# The audit fixes on one H200: the allocator's active peak as memory/max_active, resume with the
# data-stream identity, and the grad-sync path; then the GPU files they touch.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 480 python3 -m pytest -q -m gpu -rsx tests/gpu/test_gpu_monitor_gpu.py tests/gpu/test_checkpoint_gpu.py \
    tests/gpu/test_grad_sync_gpu.py > $OUT/call1_pytest.txt 2>&1; echo "pytest rc $?"
tail -5 $OUT/call1_pytest.txt
echo "all done at $((SECONDS-T0)) s"
