# Nsight Compute: cuDNN's forward kernel and ours at the anchor shape (launch, occupancy, throughput,
# instructions, warp states; cuDNN's SASS with per-instruction counts).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
P=docs/perf/2026-11-30_h200_tk_bwd_experiments/ncu_probe.py
date -u > $OUT/date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || exit 1
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second
for impl in cudnn tk; do
  if [ $impl = cudnn ]; then K=regex:fprop; else K=regex:fwd_kernel; fi
  timeout 200 ncu --clock-control none -k $K --launch-skip 2 --launch-count 1 \
     --section LaunchStats --section Occupancy --section SpeedOfLight --section ComputeWorkloadAnalysis \
     --section InstructionStats --section WarpStateStats --section SourceCounters --metrics $M \
     -o $OUT/$impl python3 $P $impl > $OUT/ncu_${impl}_run.txt 2>&1
  ncu -i $OUT/$impl.ncu-rep --page details > $OUT/${impl}_fwd_details.txt 2>&1
  ncu -i $OUT/$impl.ncu-rep --page source --csv --print-source sass > $OUT/${impl}_fwd_sass.csv 2>&1
  gzip -f $OUT/${impl}_fwd_sass.csv; rm -f $OUT/$impl.ncu-rep
done
ls -la $OUT
grep -E "Duration|Block Size|Grid Size|Registers Per|Dynamic Shared|Threads|Waves Per SM|Achieved Occupancy|Theoretical Occupancy|Block Limit|Executed Instructions  |SM Frequency|Compute \(SM\) Throughput|hmma|wavefronts" $OUT/*_fwd_details.txt
