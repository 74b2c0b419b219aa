#!/bin/bash
# Session 14 call 2 (1 x H200): torch 2.11's copy-engine all-gather API; the exposed-FSDP row at local batch 4.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
timeout 90 python3 docs/perf/2026-12-01_h200_fsdp_overhead_copy_engine/probe_api.py > $OUT/probe_api.txt 2>&1; echo "api rc $?"
cat $OUT/probe_api.txt | grep -v Warning | head -30
S=docs/perf/2026-12-01_h200_70b_layer_split/x1_lb4.toml
python3 scripts/bench_train.py --suite $S --only 'none AC' --ngpu 1 --warmup 2 --steps 3 --timeout 130 --profile --out $OUT/prof_lb4.md > $OUT/prof_lb4.log 2>&1; echo "prof rc $?"
(cd $OUT && tar czf prof_lb4.tgz prof_lb4 && rm -rf prof_lb4)
grep -E "^\| 70B" $OUT/prof_lb4.md | awk -F"|" '{print $2,$10,$13,$16}'
grep -i per-layer $OUT/prof_lb4.md
