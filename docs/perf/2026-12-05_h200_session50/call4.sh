# Call 4 (nvidia-h200): a third attention implementation on section 7's 50-step command (16-layer 8B,
# one H200), to read the TK-vs-SDPA loss differences against: our Triton kernel, runs 1-3.
#   bash docs/perf/2026-12-05_h200_session50/call4.sh; then curves.py on the runs
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; sha256sum kernels/attention/*.py; } > $OUT/call4_date.txt
T0=$SECONDS
for i in 1 2 3; do
  [ $((SECONDS-T0)) -gt 380 ] && { echo "out of time before triton_$i"; break; }
  timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
    --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
    --model.attention=triton --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/call4_runs --run.name=triton_$i > /tmp/call4_triton_$i.log 2>&1
  echo "triton_$i rc $? at $((SECONDS-T0)) s"
  { echo "== triton_$i"; head -n 3 /tmp/call4_triton_$i.log; tail -n 4 /tmp/call4_triton_$i.log; } >> $OUT/call4_logs.txt
  cp /tmp/call4_runs/triton_$i/metrics.jsonl $OUT/call4_triton_$i.jsonl
done
