# One device call: 5h's micro-benchmark with ONE_WG=1 (one consumer warpgroup issuing alone) or
# ONE_WG=2 (the same with coupled fills).
#   bash docs/perf/2026-12-04_h200_wgmma_one_warpgroup/call.sh N [1|2]
set -u
N=${1:-1}; ONE=${2:-1}
M=docs/perf/2026-12-03_h200_wgmma_fp8_micro
{ date -u; sha256sum $M/micro.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
FLAGS=$(python3 -c "from kernels.thunderkittens import build; from pathlib import Path; print(' '.join(build.nvcc_flags(Path('$PWD/.tk'))))")
nvcc $FLAGS -Xptxas -v -o /tmp/micro $M/micro.cu kernels/thunderkittens/driver_shim.cpp -ldl > $OUT/call${N}_build.txt 2>&1; echo "build rc $?"
timeout 200 env ONE_WG=$ONE /tmp/micro > $OUT/call${N}_micro.txt 2>&1; echo "micro rc $?"
cat $OUT/call${N}_micro.txt
