# Sourced by callN.sh (N set): the device environment, the date file (kernel hashes, GPU) and the
# extension build. main's GEMM for the A/B comes from a copy of its source carried in .tk/.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
export AB_MAIN_GEMM=$PWD/.tk/main_gemm_fp8_rowwise_sm90.cu
D=docs/perf/2026-12-04_h200_fp8_gemm_192x256
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu $AB_MAIN_GEMM; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call${N}_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call${N}_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
