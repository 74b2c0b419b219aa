# Bench rounds (first GPU run of --rounds), then where the anchor-layout backward loses at S 16384:
# default vs deterministic order vs cuDNN, and Nsight Compute memory metrics of the main kernel.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call1_date.txt
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 150 python3 -m kernels.thunderkittens.bench --attention anchor,8b,70b-tp8 --gemm '8192^3' > $OUT/call1_bench.txt 2>&1; tail -30 $OUT/call1_bench.txt
timeout 150 python3 $D/locality.py 2 > $OUT/call1_locality.txt 2>&1; tail -22 $OUT/call1_locality.txt
M=gpu__time_duration.sum,sm__cycles_elapsed.avg.per_second,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed,lts__t_sector_hit_rate.pct,dram__bytes_read.sum,dram__bytes_write.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed
for cfg in "tk 64 8 8192" "tk 64 8 16384" "tk-det 64 8 16384" "tk 32 8 16384"; do
  echo "== $cfg" >> $OUT/call1_ncu.txt
  timeout 90 ncu --clock-control none -k regex:bwd_kernel --launch-skip 1 --launch-count 1 --metrics $M \
      python3 $D/ncu_shape.py $cfg >> $OUT/call1_ncu.txt 2>&1
done
echo "== cudnn 64 8 16384" >> $OUT/call1_ncu.txt
timeout 90 ncu --clock-control none -k regex:bprop --launch-skip 1 --launch-count 1 --metrics $M \
    python3 $D/ncu_shape.py cudnn 64 8 16384 >> $OUT/call1_ncu.txt 2>&1
grep -E "^==|duration|per_second|hmma|hit_rate|bytes_read|bytes_write|dram__throughput" $OUT/call1_ncu.txt
