# Prepared for the next H200 call (not run): main's slack-0 forward on the hardware of ANCHORS and of
# section 7's 16-layer curves. (1) the TK GPU tests, (2) the acceptance bench, (3) three 16-layer TK
# runs of section 7's command, for envelope.py against the five H200 SDPA runs of
# docs/perf/2026-12-04_h200_tk_loss_curves_slack8 and 2026-12-05_h200_session50.
#   bash docs/perf/2026-12-05_tk_slack_sweep/next_h200.sh   (nvidia-h200, .tk carried)
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; git log -1 --format=%H 2>/dev/null; sha256sum kernels/thunderkittens/*.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/h200_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/h200_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/h200_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"; tail -n 1 $OUT/h200_tests.txt
timeout 200 python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/h200_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/h200_bench.txt | grep -v "^|---" | cut -c1-150
for i in 1 2 3; do
  [ $((SECONDS-T0)) -gt 440 ] && { echo "out of time before thunderkittens_$i"; break; }
  timeout 150 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
    --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
    --model.attention=thunderkittens --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/h200_runs --run.name=thunderkittens_$i > /tmp/h200_thunderkittens_$i.log 2>&1
  echo "thunderkittens_$i rc $? at $((SECONDS-T0)) s"
  cp /tmp/h200_runs/thunderkittens_$i/metrics.jsonl $OUT/h200_tk0_$i.jsonl 2>/dev/null
done
