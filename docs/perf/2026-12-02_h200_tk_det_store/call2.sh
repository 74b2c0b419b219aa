# Deterministic TK backward with ticket-ordered CTAs (no reliance on the hardware's dispatch
# order): the TK test file (with the new side-stream test), then det_ab.py, 2 rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call2_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 150 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call2_tests.txt 2>&1; tail -3 $OUT/call2_tests.txt
timeout 120 python3 docs/perf/2026-12-02_h200_tk_det_bwd/det_ab.py 2 anchor,8b,70b-tp8 2>&1 | tee $OUT/call2_det_ab.txt | tail -12
