# A/B of the FP8 GEMM's stream-K ticket (ticket_ab.patch applied on the device copy only: variant
# "noticket" takes blockIdx as before), 4 interleaved rounds with _scaled_mm, section 5b's harness.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call4_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call4_tests.txt 2>&1; tail -2 $OUT/call4_tests.txt
timeout 300 python3 docs/perf/2026-12-01_h200_fp8_gemm_power/gemm_ab.py "8192^3,70B w2,8B w1/w3" 4 "head,noticket" 2>&1 | tee $OUT/call4_ticket_ab.txt | tail -40
