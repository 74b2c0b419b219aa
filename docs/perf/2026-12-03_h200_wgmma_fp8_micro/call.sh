# The FP8 wgmma micro-benchmark (micro.cu), built with the extension's nvcc flags.
set -u
N=${1:-1}  # call number (calls 1 and 2 ran the micro.cu of their time; see README)
D=docs/perf/2026-12-03_h200_wgmma_fp8_micro
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call${N}_date.txt
FLAGS=$(python3 -c "from kernels.thunderkittens import build; from pathlib import Path; print(' '.join(build.nvcc_flags(Path('$PWD/.tk'))))")
nvcc $FLAGS -o /tmp/micro $D/micro.cu kernels/thunderkittens/driver_shim.cpp -ldl > $OUT/call${N}_build.txt 2>&1; echo "build rc $?"
timeout 300 /tmp/micro > $OUT/call${N}_micro.txt 2>&1; echo "micro rc $?"
cat $OUT/call${N}_micro.txt
