# Nsight Compute on main's TK forward and backward kernels (anchor shape, third launch), as section
# 4n's call 3 did, for the shared-memory wavefronts per instruction (SourceCounters).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
P=docs/perf/2026-12-02_h200_fa3_reference/ncu_probe.py
W=$OUT/call2; mkdir -p $W
{ date -u; git log -1 --format='%H %s'; git status --short; } > $OUT/call2_date.txt
T0=$SECONDS
timeout 120 python3 -m kernels.thunderkittens.build > $OUT/call2_build.txt 2>&1; echo "build rc $? at $((SECONDS-T0)) s"
M=gpu__time_duration.sum,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,sm__inst_executed.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum,smsp__cycles_active.avg,sm__cycles_elapsed.avg,sm__cycles_elapsed.avg.per_second,dram__bytes.sum,lts__t_bytes.sum
for K in fwd_kernel bwd_kernel; do
  timeout 150 ncu --clock-control none -k regex:$K --launch-skip 2 --launch-count 1 \
     --section SpeedOfLight --section MemoryWorkloadAnalysis --section WarpStateStats --section SourceCounters --metrics $M \
     -o $W/r python3 $P tk > $W/ncu_${K}_run.txt 2>&1
  ncu -i $W/r.ncu-rep --page details > $W/ncu_${K}_details.txt 2>&1
  ncu -i $W/r.ncu-rep --page source --csv --print-source sass > $W/ncu_${K}_sass.csv 2>&1
  gzip -f $W/ncu_${K}_sass.csv; rm -f $W/r.ncu-rep
  echo "ncu $K done at $((SECONDS-T0)) s"
done
grep -E "Duration|SM Frequency|Elapsed Cycles|hmma|wavefronts|L1/TEX Cache Throughput|inst_executed.sum" $W/ncu_*_details.txt | sed 's/  */ /g'
