# Call 1: the small-kernel builds side by side (probe.py), then the TK GPU tests on the new build.
#   git show 5f1419f:kernels/thunderkittens/attention_bwd_sm90.cu > docs/perf/2026-12-04_h200_tk_bwd_small_kernels/head_bwd.cu  (not committed)
#   bash docs/perf/2026-12-04_h200_tk_bwd_small_kernels/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_tk_bwd_small_kernels
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h $D/head_bwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
tail -n 3 $OUT/call1_build.txt
timeout 330 python3 $D/probe.py $D/head_bwd.cu 3 1 > $OUT/call1_probe.txt 2>&1; echo "probe rc $? at $((SECONDS-T0)) s"
grep -v "^$" $OUT/call1_probe.txt | grep -v "^| (not\|^|---" | cut -c1-200
timeout $((560 - (SECONDS-T0))) python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 3 $OUT/call1_tests.txt
