# Call 1: the TK GPU tests on the `il` build (the patch applied), then the column-load builds side by side (ab.py).
#   git apply docs/perf/2026-12-04_h200_tk_bwd_col_loads/col_loads.patch
#   git show 398bfd7:kernels/thunderkittens/attention_bwd_sm90.cu > docs/perf/2026-12-04_h200_tk_bwd_col_loads/head_bwd.cu  (not committed)
#   bash docs/perf/2026-12-04_h200_tk_bwd_col_loads/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_tk_bwd_col_loads
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h $D/head_bwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_build.txt
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call1_tests.txt
timeout $((570 - (SECONDS-T0))) python3 $D/ab.py $D/head_bwd.cu 4 1 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -v "^$" $OUT/call1_ab.txt | grep -v "^|---\|UserWarning\|_warn_once" | cut -c1-220
