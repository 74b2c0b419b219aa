# The persistent snake-order forward (in the tree) through the TK GPU tests, then ab.py against main
# and main + kv_free_split.patch, four rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_persistent_snake
{ date -u; git log -1 --format='%H %s'; git status --short; git diff --stat; nvidia-smi --query-gpu=name,power.limit,clocks.max.sm --format=csv; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 120 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests.txt
timeout $((575-SECONDS+T0)) python3 $D/ab.py 4 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|^check|Error|error" $OUT/call1_ab.txt | cut -c1-170 | head -30
