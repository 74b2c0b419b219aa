# Prepared in session 55 (2026-12-05), not yet run. Call 1 (one GPU, .tk carried), with
# dv_early.patch applied to the working tree, in order of need: the TK GPU tests; ab.py against the
# base's backward (4 rounds, 1 s idle, then both builds' kernel profiles); the acceptance bench of
# issue 10 on the patched build. Name the folder after the GPU that ran it once it has.
#   git apply docs/perf/2026-12-05_tk_bwd_dv_early/dv_early.patch
#   bash docs/perf/2026-12-05_tk_bwd_dv_early/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-05_tk_bwd_dv_early
git show HEAD:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
{ date -u; git log -1 --format=%H 2>/dev/null; git status --short; sha256sum kernels/thunderkittens/*.cu /tmp/head_bwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build >> $OUT/call1_date.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -v -rP -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
grep -c PASSED $OUT/call1_tests.txt; grep "x cuDNN" $OUT/call1_tests.txt; tail -n 1 $OUT/call1_tests.txt
timeout 300 python3 $D/ab.py /tmp/head_bwd.cu 4 1 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep "^| [a-z0-9-]* | \|^| .*kernel" $OUT/call1_ab.txt | cut -c1-170
timeout $((575 - (SECONDS-T0))) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call1_bench.txt | grep -v "^|---" | cut -c1-150
