# The FP8 wgmma micro-benchmark (micro.cu), built with the extension's nvcc flags. Call 3 also runs
# it on constant operands (CONSTANT=1).
set -u
N=${1:-3}  # call number (calls 1 and 2 ran earlier versions of micro.cu; see README)
D=docs/perf/2026-12-03_h200_wgmma_fp8_micro
{ date -u; git log -1 --format='%H %s'; git status --short; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call${N}_date.txt
FLAGS=$(python3 -c "from kernels.thunderkittens import build; from pathlib import Path; print(' '.join(build.nvcc_flags(Path('$PWD/.tk'))))")
nvcc $FLAGS -o /tmp/micro $D/micro.cu kernels/thunderkittens/driver_shim.cpp -ldl > $OUT/call${N}_build.txt 2>&1; echo "build rc $?"
timeout 200 /tmp/micro > $OUT/call${N}_micro.txt 2>&1; echo "micro rc $?"
timeout 200 env CONSTANT=1 /tmp/micro > $OUT/call${N}_micro_constant.txt 2>&1; echo "micro constant rc $?"
cat $OUT/call${N}_micro.txt $OUT/call${N}_micro_constant.txt
