# Call 3 (2026-12-02 00:13 UTC, c231e40): the section 4/5 bench and the 4d scaling script after the
# bench helpers were shared (check that the refactored scripts still run, and more rounds).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || exit 1
python3 -m kernels.thunderkittens.bench --attention anchor,8b --gemm '8192^3' 2>&1 | tee $OUT/bench3.txt
python3 docs/perf/2026-12-01_h200_tk_fwd_structure/scaling.py 1 2>&1 | tail -10 | tee $OUT/scaling_after.txt
