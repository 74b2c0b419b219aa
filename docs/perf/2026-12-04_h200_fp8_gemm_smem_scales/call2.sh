# The tree with the column scales through shared memory: the TK and FP8 GPU test files, then the
# acceptance bench (attention at the ANCHORS shape, the FP8 GEMM shapes).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/*.cu; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 240 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py tests/gpu/test_fp8_gpu.py > $OUT/call2_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/call2_tests.txt
timeout $((585-SECONDS+T0)) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call2_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
tail -22 $OUT/call2_bench.txt
