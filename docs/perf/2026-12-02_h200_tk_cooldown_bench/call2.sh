# The bench with 3 s of idle GPU before every measurement (--cooldown, first GPU run), three rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 420 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --cooldown 3 > $OUT/call2_bench.txt 2>&1; tail -24 $OUT/call2_bench.txt
echo "all done at $((SECONDS-T0)) s"
