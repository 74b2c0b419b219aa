# Deterministic mode's NaN fill in training: the 8B config cut to 8 layers, one H200, 20 steps,
# run.deterministic, fill on vs off (train_fill.py), for the TK and SDPA attention backends,
# in the order tk-fill, tk-nofill, sdpa-fill, sdpa-nofill, then each pair compared.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_det_fill_training
date -u > $OUT/call2_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build2.txt 2>&1 || { tail -30 $OUT/build2.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
COMMON="--config configs/llama3_8b.toml --model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 --run.deterministic --training.steps=20 --metrics.log_freq=1 --checkpoint.enable=false --run.dump_folder=$OUT/runs"
for attn in thunderkittens sdpa; do
  for fill in 1 0; do
    FILL=$fill timeout 200 python3 $D/train_fill.py $COMMON --model.attention=$attn --run.name=${attn}_fill$fill > $OUT/call2_${attn}_fill$fill.log 2>&1
    echo "$attn fill=$fill rc $? at $((SECONDS-T0)) s"
  done
  python3 scripts/compare_losses.py --files $OUT/runs/${attn}_fill1/metrics.jsonl $OUT/runs/${attn}_fill0/metrics.jsonl --warmup 5 --out $OUT/call2_compare_$attn.md > /dev/null 2>&1
  grep -i "tokens\|max relative" $OUT/call2_compare_$attn.md
done
echo "all done at $((SECONDS-T0)) s"
