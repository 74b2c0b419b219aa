# The noise floor of call 3: TK attention against itself, same check (its dQ adds land in varying order).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call4_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call4_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout $((300-SECONDS+T0)) python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 20 --ngpu 1 \
    --common="--model.overrides.n_layers=2 --lr_scheduler.warmup_steps=100 --compile.enable=false" \
    --a=--model.attention=thunderkittens --b=--model.attention=thunderkittens --out $OUT/call4_losses.md > $OUT/call4_compare.txt 2>&1; echo "compare rc $? at $((SECONDS-T0)) s"
tail -4 $OUT/call4_compare.txt
