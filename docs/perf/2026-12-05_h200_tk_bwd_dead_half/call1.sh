# Call 1 (nvidia-h200, .tk carried), the working tree with the dead-half skip in the backward, in
# order of need: the TK GPU tests; ab.py against the base's backward; the acceptance bench of issue
# 10; then, while time is left, 16-layer TK runs of section 7's command for envelope.py against the
# five H200 SDPA runs (the skip leaves every value bitwise except dQ's fp32 add order, so they stand
# for main's slack-0 kernels).
#   bash docs/perf/2026-12-05_h200_tk_bwd_dead_half/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-05_h200_tk_bwd_dead_half
git show HEAD:kernels/thunderkittens/attention_bwd_sm90.cu > /tmp/head_bwd.cu
{ date -u; git log -1 --format=%H 2>/dev/null; git diff --stat; sha256sum kernels/thunderkittens/*.cu /tmp/head_bwd.cu; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm,temperature.gpu --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build >> $OUT/call1_date.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 100 python3 -m pytest -v -rP -m gpu tests/gpu/test_thunderkittens.py > $OUT/call1_tests.txt 2>&1; echo "tk tests rc $? at $((SECONDS-T0)) s"
grep -c PASSED $OUT/call1_tests.txt; grep "x cuDNN" $OUT/call1_tests.txt; tail -n 1 $OUT/call1_tests.txt
timeout 260 python3 $D/ab.py /tmp/head_bwd.cu 3 1 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep "^| [a-z0-9-]* | \(dead\|head\)" $OUT/call1_ab.txt | cut -c1-150
timeout $((560 - (SECONDS-T0))) python3 -m kernels.thunderkittens.bench --attention anchor --gemm '8192^3,8B w1/w3,70B w2' --rounds 2 --cooldown 2 > $OUT/call1_bench.txt 2>&1; echo "bench rc $? at $((SECONDS-T0)) s"
grep "^|" $OUT/call1_bench.txt | grep -v "^|---" | cut -c1-150
# An H100 (80 GB) holds no 16-layer 8B with AdamW on one GPU: the runs need the H200.
MEM=$(nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits | head -n 1)
for i in 1 2 3; do
  [ "$MEM" -lt 100000 ] && { echo "GPU of $MEM MiB: no 16-layer runs"; break; }
  [ $((SECONDS-T0)) -gt 510 ] && { echo "out of time before thunderkittens_$i"; break; }
  timeout 80 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
    --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
    --model.attention=thunderkittens --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
    --run.dump_folder=/tmp/call1_runs --run.name=thunderkittens_$i > /tmp/call1_thunderkittens_$i.log 2>&1
  echo "thunderkittens_$i rc $? at $((SECONDS-T0)) s"
  { echo "== thunderkittens_$i"; head -n 3 /tmp/call1_thunderkittens_$i.log; tail -n 4 /tmp/call1_thunderkittens_$i.log; } >> $OUT/call1_logs.txt
  cp /tmp/call1_runs/thunderkittens_$i/metrics.jsonl $OUT/call1_thunderkittens_$i.jsonl 2>/dev/null
done
