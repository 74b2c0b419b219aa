# A 3-stage Q/dO ring in the default backward (three_stages.patch) against main: the TK tests on
# the patched tree, then the A/B. Leaves the device copy patched (it is thrown away).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_three_stages
date -u > $OUT/call1_date.txt
T0=$SECONDS
cp kernels/thunderkittens/attention_bwd_sm90.cu /tmp/main_bwd.cu
git apply $D/three_stages.patch || patch -p1 < $D/three_stages.patch || exit 1
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 60 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py -x > $OUT/call1_tests.txt 2>&1; echo "tests rc $? at $((SECONDS-T0)) s"; tail -1 $OUT/call1_tests.txt
timeout $((300-SECONDS+T0)) python3 $D/ab.py /tmp/main_bwd.cu 3 1.0 > $OUT/call1_ab.txt 2>&1; echo "ab rc $? at $((SECONDS-T0)) s"
tail -8 $OUT/call1_ab.txt
