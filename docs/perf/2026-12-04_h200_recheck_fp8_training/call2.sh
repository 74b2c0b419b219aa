# Call 2: how the attention bench's time splits between kernels and gaps (timing_methods.py), then
# the FP8 backends against each other in training on the new GEMM plan: the 8B config cut to 4
# layers, one GPU, 30 steps, tensorwise (the default recipe, as in section 5c) and rowwise.
#   bash docs/perf/2026-12-04_h200_recheck_fp8_training/call2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-04_h200_recheck_fp8_training
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 100 python3 $D/timing_methods.py anchor > $OUT/call2_timing.txt 2>&1; echo "timing rc $? at $((SECONDS-T0)) s"
grep -v "^$" $OUT/call2_timing.txt | grep -v Warn
for recipe in tensorwise rowwise; do
  timeout 200 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --float8.recipe=$recipe" \
    --a=--float8.backend=torch --b=--float8.backend=thunderkittens --out $OUT/call2_fp8_${recipe}_tk_vs_torch.md > $OUT/call2_compare_${recipe}.log 2>&1
  echo "compare $recipe rc $? at $((SECONDS-T0)) s"
  grep -iE "tokens|max relative" $OUT/call2_fp8_${recipe}_tk_vs_torch.md
done
