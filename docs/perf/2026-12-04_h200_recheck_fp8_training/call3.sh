# Call 3: the run-to-run floor of call 2's training comparison: the same command with both runs on
# one backend (torch against torch, thunderkittens against thunderkittens), FP8 tensorwise.
#   bash docs/perf/2026-12-04_h200_recheck_fp8_training/call3.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format=%H 2>/dev/null; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
for backend in torch thunderkittens; do
  timeout 220 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --float8.recipe=tensorwise" \
    --a=--float8.backend=$backend --b=--float8.backend=$backend --out $OUT/call3_fp8_tensorwise_${backend}_vs_${backend}.md > $OUT/call3_compare_${backend}.log 2>&1
  echo "compare $backend rc $? at $((SECONDS-T0)) s"
  grep -iE "tokens|max relative" $OUT/call3_fp8_tensorwise_${backend}_vs_${backend}.md
done
