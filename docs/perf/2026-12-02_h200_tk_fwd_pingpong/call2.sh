# The forward without TK's proxy fence before Q K^T (TK_FWD_VAR=2) alone: TK tests, then A/B vs 0.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_fwd_pingpong
date -u > $OUT/call2_date.txt
T0=$SECONDS
timeout 200 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
TK_FWD_VAR=2 timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call2_tests_var2.txt 2>&1; echo "tests var 2 rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call2_tests_var2.txt
timeout $((400-SECONDS+T0)) python3 $D/fwd_ab.py anchor,8b,70b-tp8 0,2 4 1.5 > $OUT/call2_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
tail -8 $OUT/call2_ab.txt
