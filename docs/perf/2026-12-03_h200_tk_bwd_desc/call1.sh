# Descriptors built once (desc.patch) and with the tile walk (desc_walker.patch): the TK test file
# on desc_walker, then the A/B of desc_walker, main and desc (ab.py), then a clock() trace.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_desc
git apply $D/desc_walker.patch || exit 1
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests.txt
timeout 330 python3 $D/ab.py 5 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call1_ab.txt | cut -c1-150 | head -14
# The clock() trace of the trace folder on desc_walker (the stamps of trace.patch, on this tree).
timeout $((580-SECONDS+T0)) python3 docs/perf/2026-12-03_h200_tk_bwd_trace/trace.py $OUT trace_on_desc_walker.patch > $OUT/call1_trace.txt 2>&1; echo "trace rc $? at $((SECONDS-T0)) s"
grep -v "^\[" $OUT/call1_trace.txt | tail -48
