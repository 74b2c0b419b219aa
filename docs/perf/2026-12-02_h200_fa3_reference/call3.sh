# call 2's Nsight Compute runs again: FA3's kernels are all named device_kernel<...>, so they are
# matched on the demangled name; every output goes into one archive (8 files come back at most).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 MAX_JOBS=8
D=docs/perf/2026-12-02_h200_fa3_reference
W=$OUT/call3; mkdir -p $W
date -u > $W/date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $W/tk_build.txt 2>&1; echo "tk build rc $? at $((SECONDS-T0)) s"
timeout 300 python3 $D/fa3_build.py > $W/fa3_build.txt 2>&1; echo "fa3 build rc $? at $((SECONDS-T0)) s"
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second,dram__bytes.sum,lts__t_bytes.sum
for run in tk:fwd_kernel fa3:FlashAttnFwdSm90 tk:bwd_kernel fa3:FlashAttnBwdSm90; do
  impl=${run%%:*}; K=${run#*:}
  timeout 100 ncu --clock-control none --kernel-name-base demangled -k regex:$K --launch-skip 2 --launch-count 1 \
     --section LaunchStats --section Occupancy --section SpeedOfLight --section InstructionStats \
     --section WarpStateStats --section SourceCounters --metrics $M \
     -o $W/r python3 $D/ncu_probe.py $impl > $W/ncu_${impl}_${K}_run.txt 2>&1
  ncu -i $W/r.ncu-rep --page details > $W/ncu_${impl}_${K}_details.txt 2>&1
  ncu -i $W/r.ncu-rep --page source --csv --print-source sass > $W/ncu_${impl}_${K}_sass.csv 2>&1
  gzip -f $W/ncu_${impl}_${K}_sass.csv; rm -f $W/r.ncu-rep
  echo "ncu $run done at $((SECONDS-T0)) s"
done
tar -czf $OUT/call3.tar.gz -C $OUT call3
grep -E "Duration|Registers Per|Grid Size|Block Size|Dynamic Shared Memory Per|SM Frequency|hmma|inst_executed.sum|wavefronts|dram__bytes|lts__t_bytes|Achieved Occupancy" $W/ncu_*_details.txt | sed 's/  */ /g'
