# The TK backward without TK's per-wgmma fence.proxy.async (TK_NOPF=1): the TK tests with the
# variant selected, then an interleaved A/B against the committed path.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_no_proxy_fences
date -u > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
TK_NOPF=1 timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests_nopf.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"
tail -3 $OUT/call1_tests_nopf.txt
timeout $((540-SECONDS+T0)) python3 $D/bwd_ab.py anchor,8b,70b-tp8 4 2 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
cat $OUT/call1_ab.txt | tail -10
