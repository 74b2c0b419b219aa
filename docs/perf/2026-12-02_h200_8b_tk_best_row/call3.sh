# Call 3: the TK variant of call 2 alone (call 2 returned only 8 files: its TK profile was left out).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call3_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call3_smi.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 540 python3 scripts/bench_train.py --suite scripts/bench_suites/h200_x2_8b_tk_attention.toml --ngpu 1 \
    --warmup 2 --steps 3 --timeout 150 --only 'TK attention \(1\)' --profile --profile-steps 1 --out $OUT/call3_x1_8layers.md --model.overrides.n_layers=8 > $OUT/call3_stdout.txt 2>&1
echo "suite rc $? at $((SECONDS-T0)) s"
tail -8 $OUT/call3_stdout.txt; cat $OUT/call3_x1_8layers/*.profile.md; rm $OUT/call3_x1_8layers/*.log
