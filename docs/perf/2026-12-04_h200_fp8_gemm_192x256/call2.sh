# call1's tree with the consumers' staggered start ("stagger", the tree) against the same kernel
# without it ("192x256", an edit of the tree's text) and main's 128 x 256 kernel (AB_MAIN_GEMM):
# the 14 FP8 GEMM tests on the tree, then section 5g's ab.py run() in one process.
set -u
N=${1:-2}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/.tk/main_gemm_fp8_rowwise_sm90.cu
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu $AB_MAIN_GEMM; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call${N}_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -k fp8 > $OUT/call${N}_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -2 $OUT/call${N}_tests.txt
timeout $((560-SECONDS+T0)) python3 - 4 1.0 "${SHAPES:-8192^3,8B w1/w3,70B w2,8B wq}" > $OUT/call${N}_ab.txt 2>&1 <<'PY'
import importlib.util
from pathlib import Path
spec = importlib.util.spec_from_file_location(
    "gemm_256x128_ab", Path("docs/perf/2026-12-03_h200_fp8_gemm_256x128/ab.py").resolve())
lib = importlib.util.module_from_spec(spec)
spec.loader.exec_module(lib)
SYNC = 'if (wg > 0) asm volatile("bar.sync %0, %1;\\n" ::"r"(STAGGER_BAR + wg - 1), "n"(256) : "memory");'
def no_stagger(t):
    assert t.count(SYNC) == 1 and t.count("bool released = wg == CONSUMERS - 1;") == 1
    return t.replace(SYNC, "").replace("bool released = wg == CONSUMERS - 1;", "bool released = true;")
lib.run("stagger", {"192x256": ("titankit_tk_gemm_nostagger", no_stagger)})
PY
echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call${N}_ab.txt | cut -c1-170
