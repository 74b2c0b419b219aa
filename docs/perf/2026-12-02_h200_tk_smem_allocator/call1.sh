# titankit's shared-memory allocator in the three TK kernels: the TK tests, then the A/B against a
# build of the same sources with TK's allocator.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_smem_allocator
date -u > $OUT/call1_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests.txt
timeout $((320-SECONDS+T0)) python3 $D/alloc_ab.py 3 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
tail -22 $OUT/call1_ab.txt
