# As call2.sh (deterministic mode's NaN fill in training): the 8B config cut to 8 layers, one H200, 20 steps,
# run.deterministic, fill on vs off (train_fill.py), for the TK and SDPA attention backends,
# in the reverse order of call 2 (fill off first), runs of call 3 named ..._r, then each pair compared; last, TK without
# deterministic mode.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_det_fill_training
date -u > $OUT/call3_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build3.txt 2>&1 || { tail -30 $OUT/build3.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
COMMON="--config configs/llama3_8b.toml --model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 --run.deterministic --training.steps=20 --metrics.log_freq=1 --checkpoint.enable=false --run.dump_folder=$OUT/runs"
for attn in thunderkittens sdpa; do
  for fill in 0 1; do
    FILL=$fill timeout 200 python3 $D/train_fill.py $COMMON --model.attention=$attn --run.name=${attn}_fill${fill}_r > $OUT/call3_${attn}_fill$fill.log 2>&1
    echo "$attn fill=$fill rc $? at $((SECONDS-T0)) s"
  done
  python3 scripts/compare_losses.py --files $OUT/runs/${attn}_fill1_r/metrics.jsonl $OUT/runs/${attn}_fill0_r/metrics.jsonl --warmup 5 --out $OUT/call3_compare_$attn.md > /dev/null 2>&1
  grep -i "tokens\|max relative" $OUT/call3_compare_$attn.md
done
# Context: the TK run without deterministic mode (the fill applies only under it).
FILL=1 timeout 200 python3 $D/train_fill.py $COMMON --run.deterministic=false --model.attention=thunderkittens --run.name=thunderkittens_default > $OUT/call3_thunderkittens_default.log 2>&1
echo "thunderkittens default rc $? at $((SECONDS-T0)) s"
python3 scripts/compare_losses.py --files $OUT/runs/thunderkittens_fill0_r/metrics.jsonl $OUT/runs/thunderkittens_default/metrics.jsonl --warmup 5 --out $OUT/call3_compare_tk_nofill_vs_default.md > /dev/null 2>&1
grep -i "tokens\|max relative" $OUT/call3_compare_tk_nofill_vs_default.md
echo "all done at $((SECONDS-T0)) s"
