# Call 4 (.tk carried), RESCALE_SLACK = 0: section 7's 50-step command at 8 layers (an H100 holds
# no 16-layer 8B with AdamW on one GPU), SDPA and TK runs alternating, for envelope.py.
#   bash docs/perf/2026-12-05_tk_slack_sweep/call4.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; git diff --stat; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit --format=csv; } > $OUT/call4_date.txt
T0=$SECONDS
for i in 1 2 3; do
  for a in sdpa thunderkittens; do
    [ $((SECONDS-T0)) -gt 440 ] && { echo "out of time before ${a}_$i"; break 2; }
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
      --config configs/llama3_8b.toml --model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 \
      --model.attention=$a --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
      --run.dump_folder=/tmp/call4_runs --run.name=${a}_$i > /tmp/call4_${a}_$i.log 2>&1
    echo "${a}_$i rc $? at $((SECONDS-T0)) s"
    { echo "== ${a}_$i"; head -n 3 /tmp/call4_${a}_$i.log; tail -n 4 /tmp/call4_${a}_$i.log; } >> $OUT/call4_logs.txt
    cp /tmp/call4_runs/${a}_$i/metrics.jsonl $OUT/call4_${a}_$i.jsonl 2>/dev/null
  done
done
tail -n 2 /tmp/call4_sdpa_1.log | cut -c1-200
