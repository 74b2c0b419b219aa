# run.deterministic_fill (new config key): the GPU resume tests with and without the fill.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call4_date.txt
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build4.txt 2>&1 || { tail -30 $OUT/build4.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 500 python3 -m pytest -v -m gpu tests/gpu/test_checkpoint_gpu.py -rsx > $OUT/call4_checkpoint_gpu.txt 2>&1; echo "tests rc $?"
grep -E "PASSED|FAILED|ERROR|passed|failed" $OUT/call4_checkpoint_gpu.txt | tail -8
echo "all done at $((SECONDS-T0)) s"
