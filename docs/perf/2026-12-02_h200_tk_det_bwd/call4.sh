# The committed kernels (cd1c851): the GPU checkpoint tests (exact resume, with and without TK),
# then the section 4 bench.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call4_date.txt
git log -1 --format=%h >> $OUT/call4_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 330 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_checkpoint_gpu.py > $OUT/call4_checkpoint_tests.txt 2>&1; tail -5 $OUT/call4_checkpoint_tests.txt
timeout 200 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' 2>&1 | tee $OUT/call4_bench.txt
