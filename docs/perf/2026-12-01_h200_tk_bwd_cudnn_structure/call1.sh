# TK hygiene on main + what cuDNN's attention backward kernel is made of (Nsight Compute).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
date -u > $OUT/date.txt
nvidia-smi --query-gpu=name,driver_version,clocks.sm,clocks.max.sm,power.draw,power.limit --format=csv > $OUT/gpu.txt
ncu --version > $OUT/ncu_version.txt 2>&1
( time kernels/thunderkittens/gpu_check.sh build ) > $OUT/build.txt 2>&1
python3 -m pytest -q -rs -m gpu -p no:cacheprovider tests/gpu/test_thunderkittens.py > $OUT/tests.txt 2>&1
python3 -m kernels.thunderkittens.bench --attention anchor,8b --gemm '8192^3' > $OUT/bench.txt 2>&1
P=docs/perf/2026-11-30_h200_tk_bwd_experiments/ncu_probe.py
for impl in cudnn tk; do
  if [ $impl = cudnn ]; then K=regex:bprop; else K=regex:bwd_kernel; fi
  timeout 150 ncu --clock-control none -k $K --launch-skip 2 --launch-count 1 \
     --section LaunchStats --section Occupancy --section InstructionStats --section SourceCounters \
     -o $OUT/$impl python3 $P $impl > $OUT/ncu_${impl}_run.txt 2>&1
  ncu -i $OUT/$impl.ncu-rep --page details > $OUT/${impl}_details.txt 2>&1
  ncu -i $OUT/$impl.ncu-rep --page raw --csv --print-metric-instances values > $OUT/${impl}_raw.csv 2>&1
  ncu -i $OUT/$impl.ncu-rep --page source --csv --print-source sass > $OUT/${impl}_sass.csv 2>&1
  gzip -f $OUT/${impl}_sass.csv; rm -f $OUT/$impl.ncu-rep
done
ls -la $OUT
tail -3 $OUT/tests.txt; cat $OUT/bench.txt | tail -20
