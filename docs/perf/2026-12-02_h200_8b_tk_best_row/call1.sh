# The 8B best-row suite with TK attention vs SDPA (scripts/bench_suites/h200_x2_8b_tk_attention.toml),
# cut to 8 layers on one H200: a smoke test of the TK variant in those settings before a 2-GPU start,
# and its A/B/A/B on one GPU.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call1_smi.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 540 python3 scripts/bench_train.py --suite scripts/bench_suites/h200_x2_8b_tk_attention.toml --ngpu 1 \
    --warmup 2 --steps 3 --timeout 130 --out $OUT/call1_x1_8layers.md --model.overrides.n_layers=8 > $OUT/call1_stdout.txt 2>&1
echo "suite rc $? at $((SECONDS-T0)) s"
tail -12 $OUT/call1_stdout.txt
