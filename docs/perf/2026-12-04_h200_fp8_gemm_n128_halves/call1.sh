# N = 128 halves in every K slice (ab.py's "n128") against the tree's kernel, main 5cc3613, with an
# A/A pair (AB_MAIN_GEMM is the tree's own file).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu
D=docs/perf/2026-12-04_h200_fp8_gemm_n128_halves
{ date -u; sha256sum $AB_MAIN_GEMM; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((330-SECONDS+T0)) python3 $D/ab.py 5 1.0 "8192^3,8B w1/w3" > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call1_ab.txt | cut -c1-170
