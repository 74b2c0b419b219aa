# Call 3: three runs per attention backend of call 2's setup (16-layer 8B, one H200, 50 steps), in
# alternation, every step's metrics kept, for the pairwise spread within and across backends.
#   bash docs/perf/2026-12-04_h200_tk_bwd_small_kernels/call3.sh; the table of section 7 from its
#   runs: docs/perf/2026-12-04_h200_tk_loss_curves_slack8/curves.py (written later, session 47)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
for i in 1 2 3; do
  for attn in sdpa thunderkittens; do
    [ $((SECONDS-T0)) -gt 480 ] && { echo "out of time before ${attn}_$i"; break 2; }
    timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
      --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
      --model.attention=$attn --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
      --run.dump_folder=/tmp/call3_runs --run.name=${attn}_$i > $OUT/call3_${attn}_$i.log 2>&1
    echo "${attn}_$i rc $? at $((SECONDS-T0)) s"
    cp /tmp/call3_runs/${attn}_$i/metrics.jsonl $OUT/call3_${attn}_$i.jsonl
  done
done
