# The fill test again with a private poisoned memory pool (call 3's allocator poisoning missed
# blocks), then the whole TK test file.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call4_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 300 python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call4_tests.txt 2>&1; tail -3 $OUT/call4_tests.txt; grep -n "^E " $OUT/call4_tests.txt | head
echo "all done at $((SECONDS-T0)) s"
