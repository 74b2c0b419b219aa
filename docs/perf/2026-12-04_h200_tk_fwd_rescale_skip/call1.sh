# Call 1: the TK GPU tests on the `slack 8` build (rescale_skip.patch applied), then the three
# forward builds side by side (ab.py).
#   git apply docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/rescale_skip.patch
#   git show 461e9f7:kernels/thunderkittens/attention_fwd_sm90.cu > docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/head_fwd.cu  (not committed)
#   bash docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_tk_fwd_rescale_skip
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h $D/head_fwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_build.txt
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_tests.txt
timeout $((570 - (SECONDS-T0))) python3 $D/ab.py $D/head_fwd.cu 4 1 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -v "^$" $OUT/call1_ab.txt | grep -v "^|---\|UserWarning\|_warn_once" | cut -c1-220
