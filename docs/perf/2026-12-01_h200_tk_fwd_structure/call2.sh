# Forward variants (Q from registers, rescale under Q K^T, both): tests with both selected, then the A/B.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-01_h200_tk_fwd_structure
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
TK_FWD_QREG=3 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_v3.txt 2>&1; tail -2 $OUT/tests_v3.txt
python3 $D/fwd_ab.py 3 2>&1 | tee $OUT/fwd_ab.txt
