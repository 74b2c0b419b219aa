# The GPU test files that run the TK kernels, on main after 4y / 4z (the kernels of 52e87e2).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call5_date.txt; git log -1 --format=%h >> $OUT/call5_date.txt; git diff --stat >> $OUT/call5_date.txt
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call5_build.txt 2>&1; echo "build rc $?"
timeout 330 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py tests/gpu/test_checkpoint_gpu.py tests/gpu/test_fp8_gpu.py > $OUT/call5_tests.txt 2>&1; echo "tests rc $?"; tail -3 $OUT/call5_tests.txt
