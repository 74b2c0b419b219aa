# Device call 1: the probe on main's build. bash docs/perf/2026-12-04_h200_fp8_gemm_overhead/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_fp8_gemm_overhead
{ date -u; sha256sum kernels/thunderkittens/gemm_fp8_rowwise_sm90.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 200 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 300 python3 $D/overhead.py 3 > $OUT/call1_overhead.txt 2>&1; echo "probe rc $? at $((SECONDS-T0)) s"
tail -12 $OUT/call1_overhead.txt
