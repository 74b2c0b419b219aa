# The FP8 wgmma micro-benchmark of 5h (micro.cu) with FILL_SWEEP=1: clock and rate against the fill
# bytes per K slice. Writes $OUT/call${1}_*.txt.
set -u
N=${1:-1}
M=docs/perf/2026-12-03_h200_wgmma_fp8_micro
{ date -u; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
FLAGS=$(python3 -c "from kernels.thunderkittens import build; from pathlib import Path; print(' '.join(build.nvcc_flags(Path('$PWD/.tk'))))")
nvcc $FLAGS -o /tmp/micro $M/micro.cu kernels/thunderkittens/driver_shim.cpp -ldl > $OUT/call${N}_build.txt 2>&1; echo "build rc $?"
timeout 300 env FILL_SWEEP=1 /tmp/micro > $OUT/call${N}_sweep.txt 2>&1; echo "sweep rc $?"
cat $OUT/call${N}_sweep.txt
