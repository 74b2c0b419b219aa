# Call 3 (nvidia-h200): Ctrl-C to train.sh's process group on one GPU (call 1's try started train.sh
# as a background job of a non-interactive shell, which ignores SIGINT: set -m gives it its own
# process group with SIGINT's default disposition, as a terminal's foreground job has).
#   bash docs/perf/2026-12-05_h200_recheck/call3.sh
set -u -m
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
D=/tmp/cc; rm -rf $D
bash scripts/train.sh --run.dump_folder=$D --run.name=cc --training.steps=1000000 \
  --checkpoint.enable=true --checkpoint.interval=1000000 --metrics.log_freq=1 > $OUT/call3.out 2> $OUT/call3.err &
pid=$!
for i in $(seq 90); do sleep 1; n=$(cat $D/cc/metrics.jsonl 2>/dev/null | wc -l); [ "$n" -ge 30 ] && break; done
kill -INT -- -$pid; wait $pid; rc=$?
echo "gpu ctrl-c: rc $rc (130 expected); checkpoints: $(ls $D/cc/checkpoint 2>&1 | tr '\n' ' '); last logged step: $(tail -n 1 $D/cc/metrics.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')" | tee $OUT/call3.txt
echo "tracebacks: $(grep -c Traceback $OUT/call3.err)"; grep -v " step " $OUT/call3.err | tail -n 8
