# One device call (nvidia-h200, .tk carried): the TK GPU tests (with test_errors_stay_near_cudnns,
# not yet run on a GPU), then sweep.py. Prepared 2026-12-05 (session 51) on the CPU machine; not run.
#   bash docs/perf/2026-12-05_tk_slack_sweep/call.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-05_tk_slack_sweep
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 170 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 3 $OUT/call_tests.txt
timeout $((580 - (SECONDS-T0))) python3 $D/sweep.py 3 1 > $OUT/call_sweep.txt 2>&1; echo "sweep rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call_sweep.txt | grep -v "^|---" | cut -c1-200
