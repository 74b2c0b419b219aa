# FlashAttention-3 (built here for bf16 / head dim 128 only) beside TK, cuDNN and our Triton kernel in
# the ThunderKittens attention bench: the reference the 600 TFLOP/s target was taken from, on this H200.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 MAX_JOBS=8
D=docs/perf/2026-12-02_h200_fa3_reference
date -u > $OUT/call1_date.txt
T0=$SECONDS
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call1_gpu.txt 2>&1
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_tk_build.txt 2>&1; echo "tk build rc $? at $((SECONDS-T0)) s"
timeout 330 python3 $D/fa3_build.py > $OUT/call1_fa3_build.txt 2>&1; echo "fa3 build rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call1_fa3_build.txt
timeout $((560-SECONDS+T0)) python3 $D/fa3_bench.py anchor,8b,70b-tp8 3 3 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
tail -22 $OUT/call1_bench.txt
