# Ablation (wrong results by construction): call 2's tree and main, each also without its output
# stores (ab.py, AB_SET=call3), to see what each tile shape's mainloop and scaling reach in the GEMM.
N=${1:-3}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh
AB_SET=call3 timeout $((560-SECONDS+T0)) python3 $D/ab.py 4 1.0 "${SHAPES:-8192^3,8B wq}" > $OUT/call${N}_ab.txt 2>&1
echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call${N}_ab.txt | cut -c1-170
