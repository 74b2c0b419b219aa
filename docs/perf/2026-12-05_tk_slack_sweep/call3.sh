# Call 3 (.tk carried), on the working tree with RESCALE_SLACK = 0 (the choice after calls 1-2): the
# TK GPU tests and the acceptance bench.
#   bash docs/perf/2026-12-05_tk_slack_sweep/call3.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format=%H 2>/dev/null; git diff --stat; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 150 python3 -m pytest -v -m gpu tests/gpu/test_thunderkittens.py > $OUT/call3_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
grep -c PASSED $OUT/call3_tests.txt; tail -n 1 $OUT/call3_tests.txt
timeout 240 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call3_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call3_bench.txt | grep -v "^|---" | head -n 8 | cut -c1-160
