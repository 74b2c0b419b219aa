# Call 1 (nvidia-h200, .tk carried): the GPU checkpoint tests on main after session 49's checkpoint
# changes (start-up writability probe, model-settings record, write errors, launch-config record),
# which had run on CPU only; then a resumed GPU run through scripts/train.sh.
#   bash docs/perf/2026-12-05_h200_session50/call1.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
T0=$SECONDS
{ date -u; git log -1 --format=%H 2>/dev/null; python3 -c 'import torch; print(torch.__version__)'; nvidia-smi --query-gpu=name,power.limit --format=csv,noheader; } > $OUT/call1_env.txt
timeout 420 python3 -m pytest -v -m gpu tests/gpu/test_checkpoint_gpu.py -p no:cacheprovider --durations=10 > $OUT/call1_ckpt_tests.txt 2>&1
echo "checkpoint gpu tests rc $? at $((SECONDS-T0)) s"; tail -n 3 $OUT/call1_ckpt_tests.txt
# The default (debug) config on the GPU: 20 steps saving at 10, then a relaunch to 30 that resumes.
D=/tmp/rs; rm -rf $D
for n in 20 30; do
  timeout 90 bash scripts/train.sh --run.dump_folder=$D --run.name=rs --training.steps=$n \
    --checkpoint.enable=true --checkpoint.interval=10 > $OUT/call1_train_$n.out 2> $OUT/call1_train_$n.err
  echo "train.sh to step $n rc $? at $((SECONDS-T0)) s; checkpoints: $(ls $D/rs/checkpoint | tr '\n' ' ')"
done
grep -h -i "resum\|loaded\|step  *30\|step 30" $OUT/call1_train_30.out $OUT/call1_train_30.err | head -n 5
grep -c Traceback $OUT/call1_train_*.err
echo "done at $((SECONDS-T0)) s"
