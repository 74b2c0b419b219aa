# call1's tree with the consumers' staggered start ("stagger", the tree) against the same kernel
# without it ("192x256") and main's 128 x 256 kernel: the 14 FP8 GEMM tests on the tree, then the
# A/B (ab.py, AB_SET=call2).
N=${1:-2}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call${N}_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -2 $OUT/call${N}_tests.txt
AB_SET=call2 timeout $((560-SECONDS+T0)) python3 $D/ab.py 4 1.0 "${SHAPES:-8192^3,8B w1/w3,70B w2,8B wq}" > $OUT/call${N}_ab.txt 2>&1
echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call${N}_ab.txt | cut -c1-170
