# Loss curves with the committed kernels: the 8B config cut to 16 layers (the full model's fp32
# parameters, gradients and AdamW states do not fit one H200), 50 steps, SDPA vs TK attention.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 500 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 --ngpu 1 \
    --common="--model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call3_loss_curves_8b_16layers_1gpu.md > $OUT/call3_compare.txt 2>&1; tail -14 $OUT/call3_compare.txt
echo "all done at $((SECONDS-T0)) s"
