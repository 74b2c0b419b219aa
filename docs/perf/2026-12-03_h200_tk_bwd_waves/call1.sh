# The backward's wave tail: TK and cuDNN over Hkv 8..33 (waves.py), main's kernels.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_waves
date -u > $OUT/call1_date.txt
T0=$SECONDS
timeout 100 python3 -m kernels.thunderkittens.build > $OUT/call1_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
timeout 420 python3 $D/waves.py 2 1.0 > $OUT/call1_waves.txt 2>&1; echo "waves rc $? at $((SECONDS-T0)) s"
tail -9 $OUT/call1_waves.txt
