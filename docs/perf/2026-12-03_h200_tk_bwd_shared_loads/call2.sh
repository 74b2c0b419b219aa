# Nsight Compute on the backward's main kernel, main's build then the variant's (anchor shape, the
# third launch; 4n's probe). Every output goes into one archive.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-03_h200_tk_bwd_shared_loads
W=$OUT/call2; mkdir -p $W
date -u > $W/date.txt
T0=$SECONDS
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second,dram__bytes.sum,lts__t_bytes.sum
for build in main variant; do
  [ $build = variant ] && python3 $D/variant.py apply
  timeout 100 python3 -m kernels.thunderkittens.build > $W/${build}_build.txt 2>&1; echo "$build build rc $? at $((SECONDS-T0)) s"
  timeout 150 ncu --clock-control none -k regex:bwd_kernel --launch-skip 2 --launch-count 1 \
     --section LaunchStats --section SpeedOfLight --section InstructionStats \
     --section WarpStateStats --section SourceCounters --metrics $M \
     -o $W/r python3 docs/perf/2026-12-02_h200_fa3_reference/ncu_probe.py tk > $W/${build}_ncu_run.txt 2>&1
  ncu -i $W/r.ncu-rep --page details > $W/${build}_details.txt 2>&1
  ncu -i $W/r.ncu-rep --page source --csv --print-source sass > $W/${build}_sass.csv 2>&1
  gzip -f $W/${build}_sass.csv; rm -f $W/r.ncu-rep
  echo "ncu $build done at $((SECONDS-T0)) s"
done
python3 $D/variant.py revert
tar -czf $OUT/call2.tar.gz -C $OUT call2
grep -E "Duration|SM Frequency|hmma|inst_executed.sum|wavefronts|dram__bytes|Warp Cycles Per Issued" $W/*_details.txt | sed 's/  */ /g'
