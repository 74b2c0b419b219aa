# Call 2 (.tk carried), on the working tree with RESCALE_SLACK = 2 (the sweep's choice): the TK GPU
# tests, the acceptance bench, the debug config through scripts/train.sh on the GPU (saved at 10,
# resumed to 30: exit status and no abort at exit, train.leave on NCCL), then confirm.py.
#   bash docs/perf/2026-12-05_tk_slack_sweep/call2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-05_tk_slack_sweep
{ date -u; git log -1 --format=%H 2>/dev/null; git diff --stat; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call2_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
tail -n 1 $OUT/call2_tests.txt
timeout 240 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call2_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call2_bench.txt | grep -v "^|---" | cut -c1-160
R=/tmp/rs; rm -rf $R
for n in 20 30; do
  timeout 90 bash scripts/train.sh --run.dump_folder=$R --run.name=rs --training.steps=$n \
    --checkpoint.enable=true --checkpoint.interval=10 > $OUT/call2_train_$n.out 2> $OUT/call2_train_$n.err
  echo "train.sh to step $n rc $? at $((SECONDS-T0)) s; checkpoints: $(ls $R/rs/checkpoint | tr '\n' ' ')"
done
grep -c "Traceback\|terminate called" $OUT/call2_train_*.err
tail -n 2 $OUT/call2_train_30.err
timeout $((585 - (SECONDS-T0))) python3 $D/confirm.py 4 1 > $OUT/call2_confirm.txt 2>&1; echo "confirm rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call2_confirm.txt | grep -v "^|---" | cut -c1-150
