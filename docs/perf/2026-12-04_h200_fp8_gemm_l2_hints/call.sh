# One device call: bash docs/perf/2026-12-04_h200_fp8_gemm_l2_hints/call.sh N [rounds] [shapes]
# (main's GEMM source copied to .tk/main_gemm_fp8_rowwise_sm90.cu beforehand, carried with .tk)
set -u
N=$1; ROUNDS=${2:-4}; SHAPES=${3:-"8192^3,8B w1/w3,70B w2"}
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/.tk/main_gemm_fp8_rowwise_sm90.cu
D=docs/perf/2026-12-04_h200_fp8_gemm_l2_hints
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu $AB_MAIN_GEMM; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
T0=$SECONDS
timeout 200 python3 -m kernels.thunderkittens.build > $OUT/call${N}_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 480 python3 $D/ab.py $ROUNDS 0.5 "$SHAPES" > $OUT/call${N}_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds" $OUT/call${N}_ab.txt | tail -40
