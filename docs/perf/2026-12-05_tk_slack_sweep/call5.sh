# Call 5 (.tk carried): call 4's setup with two more SDPA runs (4, 5) and three TK runs with the
# forward at main's RESCALE_SLACK = 8 (the device copy of the source edited; the build cache
# rebuilds on a source change), for envelope.py against call 4's slack-0 TK runs.
#   bash docs/perf/2026-12-05_tk_slack_sweep/call5.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
F=kernels/thunderkittens/attention_fwd_sm90.cu
T0=$SECONDS
run() {  # name, attention
  [ $((SECONDS-T0)) -gt 480 ] && { echo "out of time before $1"; return; }
  timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
    --config configs/llama3_8b.toml --model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 \
    --model.attention=$2 --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/call5_runs --run.name=$1 > /tmp/call5_$1.log 2>&1
  echo "$1 rc $? at $((SECONDS-T0)) s"
  { echo "== $1"; head -n 3 /tmp/call5_$1.log; tail -n 4 /tmp/call5_$1.log; } >> $OUT/call5_logs.txt
  cp /tmp/call5_runs/$1/metrics.jsonl $OUT/call5_$1.jsonl 2>/dev/null
}
sed -i 's/constexpr float RESCALE_SLACK = 0.f;/constexpr float RESCALE_SLACK = 8.f;/' $F
{ date -u; grep -n "RESCALE_SLACK = " $F; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit --format=csv; } > $OUT/call5_date.txt
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call5_build.txt 2>&1; echo "slack 8 build rc $? at $((SECONDS-T0)) s"
run sdpa_4 sdpa; run tk8_1 thunderkittens; run sdpa_5 sdpa; run tk8_2 thunderkittens; run tk8_3 thunderkittens
