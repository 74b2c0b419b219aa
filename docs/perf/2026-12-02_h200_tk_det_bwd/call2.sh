# det_variants.patch applied: the TK test file's deterministic tests (variant 0 = committed), then
# det_variants.py (3 rounds).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_det_bwd
date -u > $OUT/call2_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py -k deterministic > $OUT/call2_tests.txt 2>&1; tail -3 $OUT/call2_tests.txt
timeout 300 python3 $D/det_variants.py 3 2>&1 | tee $OUT/call2_det_variants.txt
