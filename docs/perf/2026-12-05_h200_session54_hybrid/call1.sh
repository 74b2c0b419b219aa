# Call 1 (nvidia-h200, .tk carried): section 7's 16-layer 8B command, 50 steps, with attention's
# forward and backward from different backends (mix.py). Runs: sdpa,sdpa (the mix path's control,
# cuDNN for both halves; expected among the five SDPA runs, it was not: section 7), thunderkittens,sdpa
# and sdpa,thunderkittens.
#   bash docs/perf/2026-12-05_h200_session54_hybrid/call1.sh [mix ...]
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
MIXES=${*:-sdpa,sdpa thunderkittens,sdpa sdpa,thunderkittens}
TAG=${TAG:-call1}  # LIMIT: seconds after which no further run starts (default 400)
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu docs/perf/2026-12-05_h200_session54_hybrid/mix.py; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu,power.draw --format=csv; } > $OUT/${TAG}_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > /tmp/${TAG}_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s" | tee $OUT/${TAG}_logs.txt
for mix in $MIXES; do
  [ $((SECONDS-T0)) -gt ${LIMIT:-400} ] && { echo "out of time before $mix" | tee -a $OUT/${TAG}_logs.txt; break; }
  name=$(echo $mix | tr , _)
  ATTN_MIX=$mix timeout 170 python3 -m torch.distributed.run --standalone --nproc_per_node=1 \
    docs/perf/2026-12-05_h200_session54_hybrid/mix.py \
    --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
    --model.attention=thunderkittens --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/${TAG}_runs --run.name=$name > /tmp/${TAG}_$name.log 2>&1
  rc=$?
  { echo "== $mix rc $rc at $((SECONDS-T0)) s"; grep -E "mix.py|error|Error" /tmp/${TAG}_$name.log | head -5;
    grep -E "step +(1|13|20|28|35|50) " /tmp/${TAG}_$name.log | cut -c1-120; } | tee -a $OUT/${TAG}_logs.txt
  [ $rc -ne 0 ] && tail -n 30 /tmp/${TAG}_$name.log >> $OUT/${TAG}_logs.txt
  cp /tmp/${TAG}_runs/$name/metrics.jsonl $OUT/${TAG}_$name.jsonl 2>/dev/null
done
