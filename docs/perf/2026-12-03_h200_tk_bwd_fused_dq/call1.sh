# dQ converted inside the backward's main kernel: the TK tests on the tree, then the A/B against
# head (main before) and the discard variant (ab.py).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_fused_dq
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call1_date.txt
T0=$SECONDS
timeout 150 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 150 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -3 $OUT/call1_tests.txt
timeout $((560-SECONDS+T0)) python3 $D/ab.py 3 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
grep -E "^\||builds|Error|error" $OUT/call1_ab.txt | head -20
grep -E "bwd_kernel|prep_kernel|convert|Memset|fwd_kernel" $OUT/call1_ab.txt | cut -c1-140
