# bf16 pairs (sync every 2) vs the reduce after every micro-batch, and the run-to-run noise of the latter
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True
C="--config configs/llama3_8b.toml --model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 --metrics.log_freq=1 --checkpoint.enable=false --activation_checkpoint.mode=none --parallelism.fsdp_reshard_after_forward=never --parallelism.fsdp_reshard_after_backward=last_micro_batch --training.global_batch_size=16 --training.mixed_precision_reduce=bfloat16 --training.steps=40 --run.dump_folder=/tmp/runs"
for r in every every2 every_again; do
  X=""; [ $r = every2 ] && X="--parallelism.fsdp_grad_sync=every_2_micro_batches"
  timeout 170 torchrun --standalone --nproc_per_node=2 -m trainer.train $C $X --run.name=$r > $OUT/$r.log 2>&1; echo "$r rc=$? ${SECONDS}s"
  cp /tmp/runs/$r/metrics.jsonl $OUT/$r.jsonl
done
for p in "every every2" "every every_again"; do set -- $p; python3 scripts/compare_losses.py --files $OUT/$1.jsonl $OUT/$2.jsonl | tail -4; done
