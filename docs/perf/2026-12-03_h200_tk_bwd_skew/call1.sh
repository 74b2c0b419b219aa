# The skewed consumers: TK tests, then the A/B against main (ab.py).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_skew
date -u > $OUT/call1_date.txt; git log -1 --format=%h >> $OUT/call1_date.txt; git diff --stat >> $OUT/call1_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests.txt
timeout $((540-SECONDS+T0)) python3 $D/ab.py 3 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
tail -12 $OUT/call1_ab.txt
