# The committed kernels (no probe patch): GPU tests, the bench in rounds, the loss curves of an
# 8-layer Llama-3 8B with SDPA vs TK attention on one GPU.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call7_date.txt
git log -1 --format=%h > $OUT/call7_commit.txt
grep -c TK_BWD_LEGACY kernels/thunderkittens/attention_bwd_sm90.cu
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call7_tests.txt 2>&1; tail -1 $OUT/call7_tests.txt
timeout 150 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' > $OUT/call7_bench.txt 2>&1; tail -18 $OUT/call7_bench.txt
timeout 150 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 20 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call7_loss_curves_8b_8layers_1gpu.md > $OUT/call7_compare.txt 2>&1; tail -12 $OUT/call7_compare.txt
