# The noise floor of call 3 (same 16-layer 8B, 50 steps, one GPU): TK against TK (its dQ adds land
# in a varying order), then SDPA against SDPA.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call4_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 500 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 --ngpu 1 \
    --common="--model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=thunderkittens --b=--model.attention=thunderkittens \
    --out $OUT/call4_loss_curves_tk_vs_tk.md > $OUT/call4_compare.txt 2>&1; tail -4 $OUT/call4_compare.txt
timeout 300 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 --ngpu 1 \
    --common="--model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=sdpa \
    --out $OUT/call4_loss_curves_sdpa_vs_sdpa.md > $OUT/call4_compare_sdpa.txt 2>&1; tail -4 $OUT/call4_compare_sdpa.txt
echo "all done at $((SECONDS-T0)) s"
