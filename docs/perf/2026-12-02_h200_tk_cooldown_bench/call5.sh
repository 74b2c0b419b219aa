# `python -m kernels.bench attention` with its new ThunderKittens row and --cooldown, and
# `python -m kernels.bench fp8_gemm` after its TK check moved to kernels/thunderkittens/build.py.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call5_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 300 python3 -m kernels.bench attention --shapes anchor --cooldown 3 > $OUT/call5_attention_bench.txt 2>&1; grep -E "^\| anchor|skipped|total" $OUT/call5_attention_bench.txt
echo "attention done at $((SECONDS-T0)) s"
timeout 150 python3 -m kernels.bench fp8_gemm --shapes square --timer events > $OUT/call5_fp8_bench.txt 2>&1; tail -12 $OUT/call5_fp8_bench.txt
echo "all done at $((SECONDS-T0)) s"
