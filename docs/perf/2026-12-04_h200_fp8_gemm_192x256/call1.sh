# The tree's FP8 GEMM (192 x 256 tiles, three consumer warpgroups, N = 128 wgmma halves, 3-stage
# ring, stores right after each tile) against main's 128 x 256 kernel: the 14 FP8 GEMM tests on the
# tree, the A/B (ab.py, AB_SET=call1), then the fill-bytes sweep of the wgmma micro-benchmark
# (docs/perf/2026-12-04_h200_fp8_fill_bytes).
N=${1:-1}
source docs/perf/2026-12-04_h200_fp8_gemm_192x256/common.sh
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call${N}_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -2 $OUT/call${N}_tests.txt
AB_SET=call1 timeout $((470-SECONDS+T0)) python3 $D/ab.py 4 1.0 "${SHAPES:-8192^3,8B w1/w3,70B w2,8B wq}" > $OUT/call${N}_ab.txt 2>&1
echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call${N}_ab.txt | cut -c1-170
if [ $((SECONDS-T0)) -lt 480 ]; then bash docs/perf/2026-12-04_h200_fp8_fill_bytes/call.sh $((N + 1)) | tail -32; fi
