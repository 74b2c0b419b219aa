# Main after this folder's A/B: the TK bench (attention and the FP8 acceptance shape), then 50 steps
# of the 8B config cut to 8 layers on one GPU, SDPA against TK attention on the same data.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
git log -1 --format=%h > $OUT/call2_commit.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 250 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call2_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
tail -22 $OUT/call2_bench.txt
timeout $((570-SECONDS+T0)) python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call2_loss_curves_8b_8layers_1gpu.md > $OUT/call2_compare.txt 2>&1; echo "compare rc $? at $((SECONDS-T0)) s"
tail -8 $OUT/call2_compare.txt
