# Kernel-by-kernel time of a forward+backward in do_bench's loop, TK vs cuDNN, anchor and 8B shapes.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call2_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
for sh in "64 8 8192" "32 8 8192"; do timeout 120 python3 $D/prof.py $sh 2>&1 | grep -v Warning; done | tee $OUT/call2_prof.txt
