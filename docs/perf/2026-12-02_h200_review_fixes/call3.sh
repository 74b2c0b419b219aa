# After the preemption-first checkpoint order (after_step), the load_step record and the data-stream
# identity: the GPU checkpoint tests once more on one H200.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build3.txt 2>&1 || { tail -30 $OUT/build3.txt; exit 1; }
timeout 260 python3 -m pytest -q -m gpu -rsx tests/gpu/test_checkpoint_gpu.py > $OUT/call3_pytest.txt 2>&1; echo "pytest rc $?"
tail -3 $OUT/call3_pytest.txt
echo "all done at $((SECONDS-T0)) s"
