# Where the fused conversion's slowdown comes from: ab2.py (main against the patch and two timing-only
# variants), anchor shape.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_fused_dq
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((420-SECONDS+T0)) python3 $D/ab2.py 3 1.0 > $OUT/call2_ab2.txt 2>&1; echo "ab2 rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call2_ab2.txt | head -20
