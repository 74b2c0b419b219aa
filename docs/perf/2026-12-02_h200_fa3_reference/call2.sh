# FA3 against TK: Nsight Compute on both forward and backward kernels at the anchor shape, then the
# energy per FLOP of forward+backward under the 700 W limit (TK, FA3, cuDNN interleaved).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1 MAX_JOBS=8
D=docs/perf/2026-12-02_h200_fa3_reference
date -u > $OUT/call2_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call2_tk_build.txt 2>&1; echo "tk build rc $? at $((SECONDS-T0)) s"
timeout 300 python3 $D/fa3_build.py > $OUT/call2_fa3_build.txt 2>&1; echo "fa3 build rc $? at $((SECONDS-T0)) s"
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg.per_second,dram__bytes.sum,lts__t_bytes.sum
for run in tk:fwd_kernel fa3:FlashAttnFwdSm90 tk:bwd_kernel fa3:FlashAttnBwdSm90; do
  impl=${run%%:*}; K=${run#*:}
  timeout 100 ncu --clock-control none -k regex:$K --launch-skip 2 --launch-count 1 \
     --section LaunchStats --section Occupancy --section SpeedOfLight --section InstructionStats \
     --section WarpStateStats --section SourceCounters --metrics $M \
     -o $OUT/r python3 $D/ncu_probe.py $impl > $OUT/call2_ncu_${impl}_${K}_run.txt 2>&1
  ncu -i $OUT/r.ncu-rep --page details > $OUT/call2_ncu_${impl}_${K}_details.txt 2>&1
  ncu -i $OUT/r.ncu-rep --page source --csv --print-source sass > $OUT/call2_ncu_${impl}_${K}_sass.csv 2>&1
  gzip -f $OUT/call2_ncu_${impl}_${K}_sass.csv; rm -f $OUT/r.ncu-rep
  echo "ncu $run done at $((SECONDS-T0)) s"
done
timeout $((570-SECONDS+T0)) python3 $D/energy.py anchor 2 4 > $OUT/call2_energy.txt 2>&1; echo "energy rc $? at $((SECONDS-T0)) s"
cat $OUT/call2_energy.txt
grep -E "^  [a-zA-Z]|Duration|Registers Per|Grid Size|Block Size|Executed Instructions  |SM Frequency|hmma|inst_executed.sum|wavefronts|dram__bytes|lts__t_bytes" $OUT/call2_ncu_*_details.txt | grep -v "^--" | head -60
