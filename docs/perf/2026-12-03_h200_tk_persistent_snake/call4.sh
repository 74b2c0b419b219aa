# Main after 4ze (8517fce): the GPU test files that run the TK kernels, then a short TK-vs-SDPA loss check.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 400 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py tests/gpu/test_checkpoint_gpu.py tests/gpu/test_fp8_gpu.py > $OUT/call4_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call4_tests.txt
timeout $((580-SECONDS+T0)) python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 20 --ngpu 1 --out $OUT/call4_loss_curves.md \
  --common="--model.overrides.n_layers=2 --lr_scheduler.warmup_steps=100 --compile.enable=false" \
  --a=--model.attention=sdpa --b=--model.attention=thunderkittens > $OUT/call4_losses.txt 2>&1; echo "losses rc $? at $((SECONDS-T0)) s"
tail -15 $OUT/call4_losses.txt | cut -c1-160
