# The monitor test after the FP8 GPU tests: the old form (a temporary copy, not committed) and the new.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
T0=$SECONDS
timeout 300 python3 -m pytest -q -s -rA -m gpu tests/gpu/test_fp8_gpu.py tests/gpu/test_zz_old_monitor_tmp.py tests/gpu/test_gpu_monitor_gpu.py > $OUT/call3_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
grep -E "allocated before|PASSED|FAILED|XFAIL|XPASS|passed|failed" $OUT/call3_tests.txt | tail -30
