# Section 4f's deterministic training pair again, with paired key blocks and the unfilled TK buffers:
# the 8-layer Llama-3 8B on one GPU, 30 steps, run.deterministic = true, sdpa vs thunderkittens.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call5_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 280 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100 --run.deterministic" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call5_loss_curves_8b_8layers_1gpu_deterministic.md > $OUT/call5_compare.txt 2>&1
tail -4 $OUT/call5_compare.txt
echo "all done at $((SECONDS-T0)) s"
