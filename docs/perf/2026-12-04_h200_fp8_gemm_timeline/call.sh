# One device call: [AB_SET=store|prefetch] [TRACE="set:variant,..."] \
#   bash docs/perf/2026-12-04_h200_fp8_gemm_timeline/call.sh N [rounds] [shapes]
# (main's GEMM source copied to .tk/main_gemm_fp8_rowwise_sm90.cu beforehand, carried with .tk)
N=$1; ROUNDS=${2:-4}; SHAPES=${3:-"8192^3,8B w1/w3"}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh  # environment, date file, build
D=docs/perf/2026-12-04_h200_fp8_gemm_timeline
timeout 240 python3 $D/trace.py "$SHAPES" "${TRACE:-}" > $OUT/call${N}_trace.txt 2>&1; echo "trace rc $? at $((SECONDS-T0)) s"
grep -E "^build|^probe" $OUT/call${N}_trace.txt
timeout 400 python3 $D/ab.py $ROUNDS 0.5 "$SHAPES" > $OUT/call${N}_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds" $OUT/call${N}_ab.txt | tail -40
