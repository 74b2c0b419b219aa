# Call 1 (nvidia-h200, .tk carried): main's GPU suite after sessions 47-48 (start-up checks, signals,
# logging), then Ctrl-C through scripts/train.sh on torch 2.11: the CPU tests of it, and one GPU run.
#   bash docs/perf/2026-12-05_h200_recheck/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
T0=$SECONDS
{ date -u; git log -1 --format=%H 2>/dev/null; python3 -c 'import torch; print(torch.__version__)'; } > $OUT/call1_env.txt
TD=$(python3 -c 'import importlib.util as u; print(u.find_spec("torch").submodule_search_locations[0])')
echo "signals-to-handle in torch's run.py: $(grep -c -- --signals-to-handle $TD/distributed/run.py)" | tee -a $OUT/call1_env.txt
timeout 430 python3 -m pytest -q -m gpu tests/gpu -p no:cacheprovider > $OUT/call1_gpu_tests.txt 2>&1
echo "gpu tests rc $? at $((SECONDS-T0)) s"; tail -n 3 $OUT/call1_gpu_tests.txt
timeout 60 python3 -m pytest -q tests/distributed/test_preemption_signals.py -k ctrl_c -p no:cacheprovider > $OUT/call1_ctrl_c_test.txt 2>&1
echo "ctrl-c test rc $? at $((SECONDS-T0)) s"; tail -n 2 $OUT/call1_ctrl_c_test.txt
# One GPU rank, the default (debug) config with checkpoints: Ctrl-C to train.sh's process group.
D=/tmp/cc; rm -rf $D
setsid bash scripts/train.sh --run.dump_folder=$D --run.name=cc --training.steps=1000000 \
  --checkpoint.enable=true --checkpoint.interval=1000000 --metrics.log_freq=1 > $OUT/call1_gpu_ctrl_c.out 2> $OUT/call1_gpu_ctrl_c.err &
pid=$!
for i in $(seq 90); do sleep 1; n=$(cat $D/cc/metrics.jsonl 2>/dev/null | wc -l); [ "$n" -ge 30 ] && break; done
kill -INT -- -$pid; wait $pid; rc=$?
echo "gpu ctrl-c: rc $rc after $n logged steps; checkpoints: $(ls $D/cc/checkpoint 2>&1 | tr '\n' ' '); last logged step: $(tail -n 1 $D/cc/metrics.jsonl | python3 -c 'import json,sys; print(json.loads(sys.stdin.read())["step"])')" | tee $OUT/call1_gpu_ctrl_c.txt
grep -c Traceback $OUT/call1_gpu_ctrl_c.err | sed 's/^/tracebacks: /'; tail -n 4 $OUT/call1_gpu_ctrl_c.err
echo "done at $((SECONDS-T0)) s"
