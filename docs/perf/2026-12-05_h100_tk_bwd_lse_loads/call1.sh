# Call 1 (one GPU, .tk carried), with lse_loads_first.patch applied to the working tree (the
# backward reads lse2 / delta before issuing S^T / dP^T), in order of need: the TK GPU tests; ab.py
# against the base's backward and the "after the wait" build; then the acceptance bench of issue 10
# on the patched build.
#   git apply docs/perf/2026-12-05_h100_tk_bwd_lse_loads/lse_loads_first.patch   # on 319b2bf
#   bash docs/perf/2026-12-05_h100_tk_bwd_lse_loads/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-05_h100_tk_bwd_lse_loads
git show HEAD:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
{ date -u; git log -1 --format=%H 2>/dev/null; git status --short; sha256sum kernels/thunderkittens/*.cu /tmp/head_bwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build >> $OUT/call1_date.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -v -rP -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
grep -c PASSED $OUT/call1_tests.txt; grep "x cuDNN" $OUT/call1_tests.txt; tail -n 1 $OUT/call1_tests.txt
timeout 300 python3 $D/ab.py /tmp/head_bwd.cu 4 1 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep "^| [a-z0-9-]* | " $OUT/call1_ab.txt | cut -c1-170
timeout $((575 - (SECONDS-T0))) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call1_bench.txt | grep -v "^|---" | cut -c1-150
