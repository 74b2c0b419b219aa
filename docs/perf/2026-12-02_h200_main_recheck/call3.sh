# The Triton FP8 GEMM's host time per call (tests/gpu/test_fp8_gpu.py::test_host_time_per_call, goal < 30 us), five runs with its printout.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
nproc >> $OUT/call3_date.txt; lscpu | grep -E "Model name|MHz" >> $OUT/call3_date.txt
for i in 1 2 3 4 5; do
  python3 -m pytest -q -s -m gpu "tests/gpu/test_fp8_gpu.py::test_host_time_per_call" -rxX 2>&1 | grep -E "host us|passed|xfail|XPASS|xpass"
done | tee $OUT/call3_host_time.txt
