# Split CTAs' dK/dV partials in per-part slices (deterministic mode): the TK test file, then
# det_ab.py, 2 rounds, at 70B-TP8 (8 CTAs share each key block) and the anchor shape.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call7_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 100 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call7_tests.txt 2>&1; tail -3 $OUT/call7_tests.txt
timeout 90 python3 docs/perf/2026-12-02_h200_tk_det_bwd/det_ab.py 2 70b-tp8,anchor 2>&1 | tee $OUT/call7_det_ab.txt
