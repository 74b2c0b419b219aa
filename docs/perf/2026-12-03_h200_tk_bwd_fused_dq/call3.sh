# Call 3: the counting warps' atomic as release-only (correct) and relaxed (timing only): ab3.py.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_fused_dq
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((420-SECONDS+T0)) python3 $D/ab3.py 3 1.0 > $OUT/call3_ab3.txt 2>&1; echo "ab3 rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|release vs|Error|error" $OUT/call3_ab3.txt | head -20
