# The committed form of the pairing (causal, split 1 only) vs no pairing (TK_BWD_LEGACY=1,
# ab_legacy_final.patch applied in the working tree): tests, do_bench A/B on five shapes.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call6_date.txt
grep -c TK_BWD_LEGACY kernels/thunderkittens/attention_bwd_sm90.cu
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call6_tests.txt 2>&1; tail -2 $OUT/call6_tests.txt
timeout 200 python3 $D/locality.py 3 64:8:8192,32:8:8192,8:1:8192,64:8:16384,64:8:8192:full tk,tk-legacy,cudnn > $OUT/call6_locality.txt 2>&1; tail -47 $OUT/call6_locality.txt
