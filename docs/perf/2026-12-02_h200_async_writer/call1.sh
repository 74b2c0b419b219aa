#!/usr/bin/env bash
# Device call 1 (nvidia-h200): the checkpoint bench on one H200, Llama-3 8B cut to 8 of 32 layers
# (33.5 GB of checkpoint), compile off as in section 9, async writes from a thread, then from a
# writer process; up to 40 steps timed while each write is in flight.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
{ nvidia-smi --query-gpu=name,driver_version,power.limit --format=csv; df -h / /tmp /dev/shm; free -g; ulimit -n; nproc;
  python3 -c "import torch; print(torch.__version__)"; } > $OUT/call1_env.txt 2>&1
cat $OUT/call1_env.txt
for w in ${WRITERS:-thread process}; do
  timeout 280 torchrun --standalone --nproc_per_node=1 scripts/bench_checkpoint.py --config configs/llama3_8b.toml \
    --layer-fraction 0.25 --run.dump_folder=/tmp/ckpt --flight-steps 40 --checkpoint.async_writer=$w \
    --out $OUT/call1_$w.md > $OUT/call1_$w.log 2>&1
  echo "== $w rc=$?"; grep -v " - INFO - " $OUT/call1_$w.log | grep -i "error\|Traceback" | head -5
  rm -rf /tmp/ckpt
done
date -u >> $OUT/call1_date.txt
for w in ${WRITERS:-thread process}; do head -3 $OUT/call1_$w.md | tail -1; grep "^Step times\|^Overlap" $OUT/call1_$w.md; done
