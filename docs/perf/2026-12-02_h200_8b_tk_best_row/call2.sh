# Call 2: the first SDPA and TK variants again, each with one profiled step after the measured ones.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call2_smi.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 540 python3 scripts/bench_train.py --suite scripts/bench_suites/h200_x2_8b_tk_attention.toml --ngpu 1 \
    --warmup 2 --steps 3 --timeout 150 --only 'attention \(1\)' --profile --profile-steps 1 --out $OUT/call2_x1_8layers.md --model.overrides.n_layers=8 > $OUT/call2_stdout.txt 2>&1
echo "suite rc $? at $((SECONDS-T0)) s"
tail -12 $OUT/call2_stdout.txt; ls $OUT/call2_x1_8layers
