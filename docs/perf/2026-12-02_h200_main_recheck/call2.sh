# The TK bench on main (attention at three shapes with cuDNN and Triton; FP8 GEMM 8192^3), 3 s idle before each measurement.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build2.txt 2>&1 || { tail -30 $OUT/build2.txt; exit 1; }
timeout 500 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --cooldown 3 > $OUT/call2_bench.txt 2>&1; echo "bench rc $?"
cat $OUT/call2_bench.txt | tail -40
echo "all done at $((SECONDS-T0)) s"
