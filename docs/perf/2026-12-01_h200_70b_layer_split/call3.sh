#!/bin/bash
# Session 13 call 3 (1 x H200): 70B 2 layers on one GPU, traces kept, default vs no re-gather.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
O="--model.overrides.n_layers=2 --parallelism.tensor_parallel_degree=1 --parallelism.enable_async_tensor_parallel=false --activation_checkpoint.mode=none --training.global_batch_size=8 --training.mixed_precision_reduce=bfloat16"
A="--config configs/llama3_70b.toml --ngpu 1 --warmup 2 --steps 3 --timeout 115 --profile --profile-steps 2"
python3 scripts/bench_train.py $A --out $OUT/def.md --traces $OUT/trdef $O > $OUT/def.log 2>&1; echo "def rc $?"
python3 scripts/bench_train.py $A --out $OUT/nl.md --traces $OUT/trnl $O --parallelism.fsdp_reshard_after_forward=never --parallelism.fsdp_reshard_after_backward=last_micro_batch > $OUT/nl.log 2>&1; echo "nl rc $?"
python3 docs/perf/2026-12-01_h200_70b_layer_split/overlap.py $(find $OUT/trdef -name 'rank0_trace.json.gz') $(find $OUT/trnl -name 'rank0_trace.json.gz') > $OUT/overlap.md 2>&1
cat $OUT/overlap.md; rm -rf $OUT/trdef $OUT/trnl
