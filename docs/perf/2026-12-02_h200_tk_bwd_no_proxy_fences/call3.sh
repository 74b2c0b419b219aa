# Training-level check of the changed backward: exact resume with TK attention (deterministic mode).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_checkpoint_gpu.py -k thunderkittens -rs > $OUT/call3_tests.txt 2>&1; echo "tests rc $?"
tail -3 $OUT/call3_tests.txt
