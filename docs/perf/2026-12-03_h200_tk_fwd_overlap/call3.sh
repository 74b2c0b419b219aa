# The committed forward (52e87e2): the TK test file, the acceptance bench, the 8-layer 8B loss curves.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt; git log -1 --format=%h >> $OUT/call3_date.txt; git diff --stat >> $OUT/call3_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call3_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call3_tests.txt
timeout 250 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call3_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
tail -22 $OUT/call3_bench.txt
timeout $((580-SECONDS+T0)) python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 50 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call3_loss_curves_8b_8layers_1gpu.md > $OUT/call3_compare.txt 2>&1; echo "compare rc $? at $((SECONDS-T0)) s"
tail -8 $OUT/call3_compare.txt
