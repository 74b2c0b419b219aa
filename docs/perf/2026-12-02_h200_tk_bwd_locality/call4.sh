# Upper bound of what the backward's DRAM traffic costs under the power limit: ablation probe
# (results wrong by construction) with private L2-hot dQ blocks (1), one Q/dO tile per CTA (2), both (3).
set -u
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk PYTHONUNBUFFERED=1
D=docs/perf/2026-12-02_h200_tk_bwd_locality
date -u > $OUT/call4_date.txt
git apply --check $D/ablate_probe.patch 2>/dev/null && git apply $D/ablate_probe.patch
grep -c TK_BWD_ABLATE kernels/thunderkittens/attention_bwd_sm90.cu
python3 -m kernels.thunderkittens.build > $OUT/build.txt 2>&1 || { tail -30 $OUT/build.txt; exit 1; }
timeout 250 python3 $D/attn_power.py 2 2.5 64:8:8192,32:8:8192 tk,tk:1,tk:2,tk:3,cudnn 2>&1 | grep -v -i warn | tee $OUT/call4_power.txt
M=gpu__time_duration.sum,dram__bytes_read.sum,dram__bytes_write.sum,lts__t_sector_hit_rate.pct
for a in 0 3; do echo "== ablate $a" >> $OUT/call4_ncu.txt
  TK_BWD_ABLATE=$a timeout 60 ncu --clock-control none -k regex:bwd_kernel --launch-skip 1 --launch-count 1 --metrics $M python3 $D/ncu_shape.py tk 64 8 8192 >> $OUT/call4_ncu.txt 2>&1; done
grep -E "^==|duration|hit_rate|bytes_" $OUT/call4_ncu.txt
