# Call 2: the 50-step loss curves on main's kernels (5f1419f; call 1's change not applied): the 8B
# config cut to 16 layers on one H200, SDPA vs TK attention, then TK against itself.
#   bash docs/perf/2026-12-04_h200_tk_bwd_small_kernels/call2.sh
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; sha256sum kernels/thunderkittens/*.cu kernels/thunderkittens/*.cuh kernels/thunderkittens/*.cpp kernels/thunderkittens/*.h; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
C="--config configs/llama3_8b.toml --steps 50 --ngpu 1"
COMMON="--common=--model.overrides.n_layers=16 --lr_scheduler.warmup_steps=100"
timeout 280 python3 scripts/compare_losses.py $C "$COMMON" --a=--model.attention=sdpa --b=--model.attention=thunderkittens \
    --out $OUT/call2_loss_curves_sdpa_vs_tk.md > $OUT/call2_compare_sdpa_vs_tk.txt 2>&1; echo "sdpa vs tk rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call2_compare_sdpa_vs_tk.txt
timeout $((570 - (SECONDS-T0))) python3 scripts/compare_losses.py $C "$COMMON" --a=--model.attention=thunderkittens --b=--model.attention=thunderkittens \
    --out $OUT/call2_loss_curves_tk_vs_tk.md > $OUT/call2_compare_tk_vs_tk.txt 2>&1; echo "tk vs tk rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call2_compare_tk_vs_tk.txt
