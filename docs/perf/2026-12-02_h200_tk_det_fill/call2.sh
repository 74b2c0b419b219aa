# With the ops allocating unfilled: the TK test file (with the new fill test), the checkpoint GPU
# tests (deterministic TK resume), and the bench's deterministic row again.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 240 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py tests/gpu/test_checkpoint_gpu.py > $OUT/call2_tests.txt 2>&1; tail -4 $OUT/call2_tests.txt
echo "tests done at $((SECONDS-T0)) s"
timeout 260 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '' --cooldown 3 --deterministic > $OUT/call2_bench_det.txt 2>&1; tail -14 $OUT/call2_bench_det.txt
echo "all done at $((SECONDS-T0)) s"
