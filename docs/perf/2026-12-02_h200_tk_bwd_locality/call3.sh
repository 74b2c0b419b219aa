# Attention under the power limit: burst vs sustained TFLOP/s, power and SM clock, TK vs cuDNN.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call3_date.txt
nvidia-smi --query-gpu=power.limit,clocks.max.sm,temperature.gpu --format=csv > $OUT/call3_smi.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 200 python3 $D/attn_power.py 2 3 64:8:8192,32:8:8192,64:8:16384 2>&1 | grep -v -i warn | tee $OUT/call3_power.txt
