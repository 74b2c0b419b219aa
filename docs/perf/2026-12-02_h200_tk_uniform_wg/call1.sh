# Warp-uniform warpgroup index (TK_UNI=1) in the TK forward, backward and FP8 GEMM: tests, then the A/B.
# Needs uni_ab.patch (this folder) applied to b9ce310: git apply docs/perf/2026-12-02_h200_tk_uniform_wg/uni_ab.patch
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_uniform_wg
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
TK_UNI=1 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_uni.txt 2>&1; tail -1 $OUT/tests_uni.txt
python3 $D/uni_ab.py 3 2>&1 | tee $OUT/uni_ab.txt
