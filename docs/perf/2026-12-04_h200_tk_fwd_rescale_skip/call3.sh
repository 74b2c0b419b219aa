# Call 3: the kept forward: the TK GPU tests (the rising-scores test now forward only), the GPU
# checkpoint tests (TK attention resumes exactly), then one 50-step TK run of section 7's setup
# (16-layer 8B, one H200), its metrics beside the session-45 runs of the same command.
#   bash docs/perf/2026-12-04_h200_tk_fwd_rescale_skip/call3.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 OMP_NUM_THREADS=1
{ date -u; git log -1 --format=%H 2>/dev/null; git status --short; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py tests/gpu/test_checkpoint_gpu.py > $OUT/call3_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
tail -n 2 $OUT/call3_tests.txt
timeout 200 python3 -m torch.distributed.run --standalone --nproc_per_node=1 -m trainer.train \
  --config configs/llama3_8b.toml --model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100 \
  --model.attention=thunderkittens --training.steps=50 --metrics.log_freq=1 --checkpoint.enable=false \
  --run.dump_folder=/tmp/call3_runs --run.name=thunderkittens_slack8 > $OUT/call3_thunderkittens_slack8.log 2>&1
echo "train rc $? at $((SECONDS-T0)) s"
cp /tmp/call3_runs/thunderkittens_slack8/metrics.jsonl $OUT/call3_thunderkittens_slack8.jsonl
