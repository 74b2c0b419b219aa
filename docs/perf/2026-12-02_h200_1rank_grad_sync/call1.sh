#!/usr/bin/env bash
# Device call 1 (nvidia-h200): one rank, 8 layers of Llama-3 8B, best-row settings with fp32 reduce:
# gradients synced after every micro-batch vs after the last only, alternating twice.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_1rank_grad_sync
date -u > $OUT/call1_date.txt
timeout 560 python3 scripts/bench_train.py --suite $D/x1_grad_sync.toml --ngpu 1 --warmup 2 --steps 3 --timeout 130 \
    --out $OUT/call1_x1_8layers.md --model.overrides.n_layers=8 > $OUT/call1_stdout.txt 2>&1
echo "suite rc $?"
date -u >> $OUT/call1_date.txt
tail -12 $OUT/call1_stdout.txt
