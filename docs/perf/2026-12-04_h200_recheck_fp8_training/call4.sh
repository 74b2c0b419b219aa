# Call 4: the whole single-GPU suite on main (the last full run was 4t, 2026-12-03).
#   bash docs/perf/2026-12-04_h200_recheck_fp8_training/call4.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format=%H 2>/dev/null; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((575 - (SECONDS-T0))) python3 -m pytest -q -m gpu tests/gpu -rfEsxX > $OUT/call4_gpu_suite.txt 2>&1; echo "suite rc $? at $((SECONDS-T0)) s"
tail -n 15 $OUT/call4_gpu_suite.txt
