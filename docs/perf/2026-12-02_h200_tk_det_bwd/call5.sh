# writer_ab.patch applied: the default-mode backward with the dQ adds made by producer warps
# (TK_WRITER=1) against the committed one (0). The TK test file with TK_WRITER=1, then section 4e's
# A/B harness, attention only, 3 interleaved rounds.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call5_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
TK_WRITER=1 timeout 200 python3 -m pytest -q -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/call5_tests_writer.txt 2>&1; tail -3 $OUT/call5_tests_writer.txt
AB_ENV=TK_WRITER AB_LABEL="producer-warp dQ adds" timeout 300 python3 docs/perf/2026-12-02_h200_tk_uniform_wg/uni_ab.py 3 attention 2>&1 | tee $OUT/call5_writer_ab.txt
