# A clock() trace of the TK backward's main kernel at the anchor shape (trace.py, trace.patch).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_trace
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 400 python3 $D/trace.py $OUT > $OUT/call1_trace.txt 2>&1; echo "trace rc $? at $((SECONDS-T0)) s"
cat $OUT/call1_trace.txt | grep -v "^\[" | tail -50
