# Forward/backward TFLOP/s against S and masking, TK vs cuDNN, with SM clock and power sampled.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-01_h200_tk_fwd_structure
date -u > $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv >> $OUT/date.txt
( time python3 -m kernels.thunderkittens.build ) > $OUT/build.txt 2>&1
nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw --format=csv,noheader -lms 100 > $OUT/smi.csv &
S=$!
python3 $D/scaling.py 2 2>&1 | tee $OUT/scaling.txt
kill $S
