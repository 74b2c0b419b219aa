# Call 5: call 3's run-to-run floor for the rowwise recipe (torch against torch; no TK build needed).
#   bash docs/perf/2026-12-04_h200_recheck_fp8_training/call5.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
{ date -u; git log -1 --format=%H 2>/dev/null; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call5_date.txt
T0=$SECONDS
timeout 140 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
  --common="--model.overrides.n_layers=4 --lr_scheduler.warmup_steps=100 --float8.enable --float8.recipe=rowwise" \
  --a=--float8.backend=torch --b=--float8.backend=torch --out $OUT/call5_fp8_rowwise_torch_vs_torch.md > $OUT/call5_compare_torch.log 2>&1
echo "compare rc $? at $((SECONDS-T0)) s"
grep -iE "tokens|max relative" $OUT/call5_fp8_rowwise_torch_vs_torch.md
