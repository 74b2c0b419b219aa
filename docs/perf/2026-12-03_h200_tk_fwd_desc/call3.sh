# Barriers tested early (early_tests.patch, applied on the device copy): the TK test file on that
# build, then ab_early.py (early, main, early_qo), four rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_fwd_desc
git diff --quiet kernels/ && { git apply $D/early_tests.patch || exit 1; }
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call3_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call3_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call3_tests.txt
timeout $((575-SECONDS+T0)) python3 $D/ab_early.py 4 1.0 > $OUT/call3_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|^check|Error|error" $OUT/call3_ab.txt | cut -c1-150 | head -30
