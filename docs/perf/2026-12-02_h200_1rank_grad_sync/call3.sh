#!/usr/bin/env bash
# Device call 3 (nvidia-h200): with fsdp_grad_sync = "auto" as the default, the new GPU test (auto vs
# every_micro_batch, bitwise losses) and the GPU checkpoint tests (their runs accumulate 2 micro-batches,
# so they now take the auto path).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/call3_date.txt
python3 -m kernels.thunderkittens.build > $OUT/call3_build.log 2>&1; echo "build rc=$?"
python3 -m pytest -q -m gpu tests/gpu/test_grad_sync_gpu.py tests/gpu/test_checkpoint_gpu.py 2>&1 | tee $OUT/call3_pytest.txt | tail -5
date -u >> $OUT/call3_date.txt
