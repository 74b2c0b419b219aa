# Forward variants of fwd_variants.patch: TK tests under 1 and 5, then the A/B of 0, 1, 4, 5.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_fwd_overlap
date -u > $OUT/call1_date.txt; git diff --stat >> $OUT/call1_date.txt
T0=$SECONDS
timeout 200 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
for v in 1 5; do
  TK_FWD_VAR=$v timeout 90 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests_var$v.txt 2>&1; echo "tests var $v rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests_var$v.txt
done
timeout $((560-SECONDS+T0)) python3 $D/fwd_ab.py anchor,8b,70b-tp8 0,1,4,5 3 1.5 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
cat $OUT/call1_ab.txt
