#!/usr/bin/env bash
# Device call 2 (nvidia-h200): the GPU checkpoint tests on main after the writer-process change
# (four async saves from a writer process with pinned shared staging, exact resume; the thread
# writer and the ThunderKittens resume as before).
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
export THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/call2_date.txt
git log --oneline -1 >> $OUT/call2_date.txt 2>/dev/null || true
python3 -m kernels.thunderkittens.build > $OUT/call2_build.log 2>&1; echo "build rc=$?"
python3 -m pytest -q -m gpu tests/gpu/test_checkpoint_gpu.py 2>&1 | tee $OUT/call2_pytest.txt | tail -5
date -u >> $OUT/call2_date.txt
