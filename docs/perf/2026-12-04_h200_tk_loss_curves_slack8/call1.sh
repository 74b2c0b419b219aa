# Call 1: section 7's 50-step runs (16-layer 8B, one H200) on main's kernels (4zi's forward): two
# more TK runs beside session 46's one, and two SDPA runs, alternating, every step's metrics kept.
#   bash docs/perf/2026-12-04_h200_tk_loss_curves_slack8/call1.sh; then curves.py on the runs
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
for i in 2 3; do
  for attn in thunderkittens sdpa; do
    [ $((SECONDS-T0)) -gt 500 ] && { echo "out of time before ${attn}_$i"; break 2; }
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
      --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
      --model.attention=$attn --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
      --run.dump_folder=/tmp/call1_runs --run.name=${attn}_$i > /tmp/call1_${attn}_$i.log 2>&1
    echo "${attn}_$i rc $? at $((SECONDS-T0)) s"
    { echo "== ${attn}_$i"; head -n 3 /tmp/call1_${attn}_$i.log; tail -n 4 /tmp/call1_${attn}_$i.log; } >> $OUT/call1_logs.txt
    cp /tmp/call1_runs/${attn}_$i/metrics.jsonl $OUT/call1_${attn}_$i.jsonl
  done
done
