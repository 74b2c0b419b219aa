# The FP8 GEMM with K slices of 64 in 8 stages (in the tree): the TK GEMM tests on it, then ab.py against main's kernel.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_fp8_gemm_bk64
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/call1_tests.txt
timeout $((580-SECONDS+T0)) python3 $D/ab.py 4 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call1_ab.txt | cut -c1-170 | head -50
