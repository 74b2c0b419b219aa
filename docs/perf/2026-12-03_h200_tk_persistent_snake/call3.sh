# The tree (persistent_pipelined.patch, as committed after this call): the attention and FP8 bench.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call3_date.txt
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call3_build.txt 2>&1; echo "build rc $?"
timeout 400 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' --rounds 2 --cooldown 2 > $OUT/call3_bench.txt 2>&1; echo "bench rc $?"
cat $OUT/call3_bench.txt | cut -c1-200 | tail -25
