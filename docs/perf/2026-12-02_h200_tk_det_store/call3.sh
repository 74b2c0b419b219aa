# FP8 GEMM stream-K with ticket-ordered CTAs: the TK test file (side-stream repeat of the stream-K
# determinism test), then the GEMM bench at the shapes of section 5.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call3_tests.txt 2>&1; tail -3 $OUT/call3_tests.txt
timeout 150 python3 -m kernels.thunderkittens.bench --attention '' --gemm '8192^3,8B w1/w3,70B w2' 2>&1 | tee $OUT/call3_gemm_bench.txt | tail -22
