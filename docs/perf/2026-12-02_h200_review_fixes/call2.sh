# 2j's first pair again, now that memory/max_active is the allocator's active peak (2j logged
# max_memory_allocated under that name): 8B with 8 layers, one H200.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
T0=$SECONDS
timeout 560 python3 scripts/bench_train.py --suite docs/perf/2026-12-02_h200_1rank_grad_sync/x1_grad_sync.toml --ngpu 1 \
    --warmup 2 --steps 3 --timeout 130 --only '\(1\)' --out $OUT/call2_x1_8layers.md --model.overrides.n_layers=8 \
    > $OUT/call2_stdout.txt 2>&1; echo "bench rc $?"
tail -12 $OUT/call2_stdout.txt
echo "all done at $((SECONDS-T0)) s"
