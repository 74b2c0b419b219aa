# The committed change (warp-uniform warpgroup index): tests, the section 4/5 bench twice, the
# backward's run-to-run reproducibility, and an 8-layer Llama-3 8B on one GPU, sdpa vs thunderkittens.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_uniform_wg
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests.txt 2>&1; tail -1 $OUT/tests.txt
python3 $D/determinism.py 2>&1 | tee $OUT/determinism.txt
python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' 2>&1 | tee $OUT/bench1.txt
python3 -m kernels.thunderkittens.bench --attention anchor --gemm '' 2>&1 | tee $OUT/bench2.txt
timeout 330 python3 scripts/compare_losses.py --config configs/llama3_8b.toml --steps 30 --ngpu 1 \
    --common="--model.overrides.n_layers=8 --lr_scheduler.warmup_steps=100" \
    --a=--model.attention=sdpa --b=--model.attention=thunderkittens --out $OUT/loss_curves_8b_8layers_1gpu.md > $OUT/compare.txt 2>&1
tail -25 $OUT/compare.txt
