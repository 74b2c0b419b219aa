# A deterministic training run with each backend: the 8-layer Llama-3 8B on one GPU, 30 steps,
# run.deterministic = true, sdpa (FlashAttention-2's deterministic backward) vs thunderkittens.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call6_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 400 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 --run.deterministic" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call6_loss_curves_8b_8layers_1gpu_deterministic.md > $OUT/call6_compare.txt 2>&1
tail -25 $OUT/call6_compare.txt
