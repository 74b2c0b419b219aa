# The 256 x 128 kernel (patch in the tree) with M groups of 8 and 16 tiles, against main.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_fp8_gemm_256x128
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((540-SECONDS+T0)) python3 $D/ab_mgroup.py 4 1.0 "8192^3,8B w1/w3" > $OUT/call3_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call3_ab.txt | cut -c1-170 | head -50
