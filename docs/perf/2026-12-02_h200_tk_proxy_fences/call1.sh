# TK attention without TK's per-wgmma fence.proxy.async (TK_NOPF=1; no_proxy_fences.patch applied
# to 1a4251d): the TK test file with it selected, then the A/B of section 4e's script.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
TK_NOPF=1 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests_nopf.txt 2>&1; tail -1 $OUT/tests_nopf.txt
AB_ENV=TK_NOPF AB_LABEL="no proxy fences" python3 docs/perf/2026-12-02_h200_tk_uniform_wg/uni_ab.py 3 attention 2>&1 | tee $OUT/nopf_ab.txt
