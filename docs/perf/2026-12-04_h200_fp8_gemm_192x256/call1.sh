# The tree's FP8 GEMM (192 x 256 tiles, three consumer warpgroups, N = 128 wgmma halves, 3-stage
# ring, stores right after each tile) against main's 128 x 256 kernel (AB_MAIN_GEMM, a copy of main's
# source carried in .tk): the 14 FP8 GEMM tests on the tree, the A/B of section 5g's ab.py (run()),
# then the fill-bytes sweep of the wgmma micro-benchmark (docs/perf/2026-12-04_h200_fp8_fill_bytes).
set -u
N=${1:-1}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/.tk/main_gemm_fp8_rowwise_sm90.cu
D=docs/perf/2026-12-04_h200_fp8_gemm_192x256
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu $AB_MAIN_GEMM; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call${N}_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call${N}_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -2 $OUT/call${N}_tests.txt
timeout $((470-SECONDS+T0)) python3 - 4 1.0 "${SHAPES:-8192^3,8B w1/w3,70B w2,8B wq}" > $OUT/call${N}_ab.txt 2>&1 <<'PY'
import importlib.util
from pathlib import Path
p = Path("docs/perf/2026-12-03_h200_fp8_gemm_256x128/ab.py")
spec = importlib.util.spec_from_file_location("gemm_256x128_ab", p.resolve())
lib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lib)
lib.run("192x256", {})
PY
echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call${N}_ab.txt | cut -c1-170
if [ $((SECONDS-T0)) -lt 480 ]; then bash docs/perf/2026-12-04_h200_fp8_fill_bytes/call.sh $((N + 1)) | tail -32; fi
