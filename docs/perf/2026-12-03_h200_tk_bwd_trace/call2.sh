# The same trace on the tile walk of 4zb (trace_walker.patch: walker.patch plus the stamps).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_trace
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 400 python3 $D/trace.py $OUT trace_walker.patch > $OUT/call2_trace.txt 2>&1; echo "trace rc $? at $((SECONDS-T0)) s"
cat $OUT/call2_trace.txt | grep -v "^\[" | tail -50
