# After the review mend (TK's move<float2>::sts/lds instead of an own helper; the store now
# shared-space): the FP8 GEMM tests of the TK file.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call4_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -2 $OUT/call4_tests.txt
