# One device call: the acceptance bench, then the grid A/B (ab.py). main's GEMM source copied to
# .tk/main_gemm_fp8_rowwise_sm90.cu beforehand and carried with .tk.
#   bash docs/perf/2026-12-04_h200_fp8_gemm_grid/call.sh N [rounds] [shapes]
N=$1; ROUNDS=${2:-4}; SHAPES=${3:-"8192^3,8B w1/w3,70B w2"}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh  # environment, date file, build
D=docs/perf/2026-12-04_h200_fp8_gemm_grid
nvidia-smi --query-gpu=clocks.sm,power.draw,temperature.gpu --format=csv -lms 500 > $OUT/call${N}_smi.csv &
SMI=$!
[ -n "${SKIP_BENCH:-}" ] || timeout 200 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call${N}_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
echo "ab start $(date -u +%T)" >> $OUT/call${N}_date.txt
timeout 330 python3 $D/ab.py $ROUNDS 0.5 "$SHAPES" > $OUT/call${N}_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
kill $SMI
grep -E "^\|" $OUT/call${N}_bench.txt | tail -12
grep -E "^\||builds" $OUT/call${N}_ab.txt | tail -40
