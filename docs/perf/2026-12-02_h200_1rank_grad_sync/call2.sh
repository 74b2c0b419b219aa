#!/usr/bin/env bash
# Device call 2 (nvidia-h200): are the two gradient-sync schedules bitwise equal on one rank with
# fp32 reduce? Llama-3 8B cut to 2 layers, run.deterministic, 4 micro-batches per step, 6 steps.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
timeout 400 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 6 --ngpu 1 \
  --common="--model.overrides.n_layers=2 --run.deterministic --training.global_batch_size=4 --training.mixed_precision_reduce=float32 --parallelism.fsdp_reshard_after_forward=never --parallelism.fsdp_reshard_after_backward=last_micro_batch --activation_checkpoint.mode=none" \
  --a=--parallelism.fsdp_grad_sync=every_micro_batch --b=--parallelism.fsdp_grad_sync=last_micro_batch \
  --out $OUT/call2_compare.md > $OUT/call2_stdout.txt 2>&1
echo "compare rc $?"
date -u >> $OUT/call2_date.txt
tail -25 $OUT/call2_stdout.txt
