# One device call: bash docs/perf/2026-12-04_h200_fp8_gemm_l2_hints/call.sh N [rounds] [shapes]
# (main's GEMM source copied to .tk/main_gemm_fp8_rowwise_sm90.cu beforehand, carried with .tk)
N=$1; ROUNDS=${2:-4}; SHAPES=${3:-"8192^3,8B w1/w3,70B w2"}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh  # environment, date file, build
D=docs/perf/2026-12-04_h200_fp8_gemm_l2_hints
timeout 480 python3 $D/ab.py $ROUNDS 0.5 "$SHAPES" > $OUT/call${N}_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds" $OUT/call${N}_ab.txt | tail -40
