# Paired key blocks walking in step (the new default causal backward) vs the previous order
# (TK_BWD_LEGACY=1, ab_legacy.patch applied in the working tree): tests, do_bench A/B, power, ncu.
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call5_date.txt
grep -c TK_BWD_LEGACY kernels/thunderkittens/attention_bwd_sm90.cu
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_thunderkittens.py > $OUT/call5_tests.txt 2>&1; tail -4 $OUT/call5_tests.txt
timeout 150 python3 $D/locality.py 2 64:8:8192,32:8:8192,8:1:8192,64:8:16384,64:8:8192:full tk,tk-legacy,cudnn > $OUT/call5_locality.txt 2>&1; tail -32 $OUT/call5_locality.txt
timeout 100 python3 $D/attn_power.py 1 2.5 64:8:8192,32:8:8192 tk,tk-legacy,cudnn 2>&1 | grep -v -i warn | tee $OUT/call5_power.txt
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_elapsed
for l in 0 1; do echo "== legacy $l" >> $OUT/call5_ncu.txt
  TK_BWD_LEGACY=$l timeout 60 ncu --clock-control none -k regex:bwd_kernel --launch-skip 1 --launch-count 1 --metrics $M python3 $D/ncu_shape.py tk 64 8 8192 >> $OUT/call5_ncu.txt 2>&1; done
grep -E "^==|duration|hit_rate|bytes_|hmma" $OUT/call5_ncu.txt
