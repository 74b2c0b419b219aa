# The committed kernels plus the key_blocks() helper of the backward: build, the TK GPU tests, the
# whole GPU suite, then default vs deterministic backward against cuDNN in one process.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
date -u > $OUT/call1_date.txt
nvidia-smi --query-gpu=name,driver_version,power.limit,clocks.max.sm --format=csv > $OUT/call1_smi.txt
grep -c "key_blocks" kernels/thunderkittens/attention_bwd_sm90.cu
T0=$SECONDS
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
echo "build $((SECONDS-T0)) s"
timeout 330 python3 -m pytest -q -m gpu tests/gpu > $OUT/call1_gpu_suite.txt 2>&1; tail -3 $OUT/call1_gpu_suite.txt
echo "suite done at $((SECONDS-T0)) s"
timeout 120 python3 docs/perf/2026-12-02_h200_tk_bwd_locality/locality.py 3 64:8:8192,32:8:8192 tk,tk-det,cudnn > $OUT/call1_locality.txt 2>&1; tail -8 $OUT/call1_locality.txt
echo "all done at $((SECONDS-T0)) s"
