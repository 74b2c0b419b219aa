# titankit's per-op AC policy against torchtitan's rule, 8B with 8 layers on one H200.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_sac_every_other_mm
date -u > $OUT/call1_date.txt
timeout 400 python3 scripts/bench_train.py --suite $D/x1_sac.toml --ngpu 1 --warmup 2 --steps 3 --timeout 100 \
    --out $OUT/call1_x1_8layers.md --model.overrides.n_layers=8 > $OUT/call1_stdout.txt 2>&1
echo "suite rc $?"
tail -12 $OUT/call1_stdout.txt
