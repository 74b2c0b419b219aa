# The persistent ThunderKittens forward (one CTA per SM, Q double buffered, K and V rings freed
# separately): the TK test file, then the attention bench against cuDNN and our Triton kernel.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call1_tests.txt
timeout $((570-SECONDS+T0)) python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '' --cooldown 3 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
tail -14 $OUT/call1_bench.txt
