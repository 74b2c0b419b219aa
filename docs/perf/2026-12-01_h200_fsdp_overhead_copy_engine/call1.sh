#!/bin/bash
# Session 14 call 1 (1 x H200): layer_probe with FP8 Linears (first GPU run); the profile summary's
# exposed-FSDP row on a real trace (70B bf16 no AC, 1 and 2 layers, local batch 1).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,power.limit --format=csv > $OUT/gpu.txt
timeout 200 python3 scripts/layer_probe.py --flavor 70B --float8 tensorwise --out $OUT/probe_70b_fp8_tw.md > $OUT/probe_fp8.log 2>&1; echo "probe fp8 rc $?"
timeout 120 python3 scripts/layer_probe.py --flavor 70B --no-lone --out $OUT/probe_70b_bf16.md > $OUT/probe_bf16.log 2>&1; echo "probe bf16 rc $?"
S=scripts/bench_suites/h200_x1_70b_layers_noac.toml
python3 scripts/bench_train.py --suite $S --ngpu 1 --warmup 2 --steps 3 --timeout 115 --profile --out $OUT/prof_lb1.md > $OUT/prof_lb1.log 2>&1; echo "prof rc $?"
tail -5 $OUT/probe_fp8.log
grep -iE "median|forward\+backward" $OUT/probe_70b_fp8_tw.md | head -5
grep -iE "median|forward\+backward" $OUT/probe_70b_bf16.md | head -5
grep -E "^\| 70B" $OUT/prof_lb1.md | awk -F"|" '{print $2,$10,$13,$16}'
grep -ril "no other compute" $OUT | head; grep -rh -i "no other compute" $OUT | head
