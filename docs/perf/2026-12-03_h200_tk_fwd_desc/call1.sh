# The forward's ring descriptors built once (with and without V waited first) and the backward's
# dS^T descriptors built once, each against main: ab.py, four rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_fwd_desc
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((570-SECONDS+T0)) python3 $D/ab.py 4 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|^check|Error|error" $OUT/call1_ab.txt | cut -c1-150 | head -30
