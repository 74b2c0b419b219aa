# Main as it stands (kernels of 97df7c7): the TK test file and the acceptance bench.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 100 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call4_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call4_tests.txt
timeout 300 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call4_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
cat $OUT/call4_bench.txt | tail -30
