# Call 2: the kept forward (rescale_skip.patch plus comments, and the new rising-scores test): the
# TK GPU tests, then the acceptance bench.
#   bash docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/call2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format=%H 2>/dev/null; git status --short; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call2_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 3 $OUT/call2_tests.txt
timeout $((570 - (SECONDS-T0))) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call2_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep -v "^$" $OUT/call2_bench.txt | cut -c1-220
