#!/bin/bash
# Session 14, 1 x H200: the README's train command on a GPU, the same with copy-engine all-gathers
# (one rank: the option must say it has no effect), then the GPU tests other than ThunderKittens'.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
python3 docs/perf/2026-12-01_h200_fsdp_overhead_copy_engine/fsdp211_src.py > $OUT/fsdp211_src.txt 2>&1; cat $OUT/fsdp211_src.txt
timeout 150 ./scripts/train.sh --training.steps=3 --run.dump_folder=/tmp/s14runs > $OUT/train_default.log 2>&1; echo "train rc $?"
grep -E "step +3|loss" $OUT/train_default.log | tail -2
timeout 150 ./scripts/train.sh --training.steps=3 --run.dump_folder=/tmp/s14runs --run.name=ce --parallelism.fsdp_all_gather=copy_engine > $OUT/train_ce.log 2>&1; echo "train ce rc $?"
grep -iE "copy_engine|NCCL_CTA" $OUT/train_ce.log | head -3
timeout 420 python3 -m pytest -q -m gpu tests/gpu --ignore=tests/gpu/test_thunderkittens.py > $OUT/gpu_tests.txt 2>&1; echo "gpu tests rc $?"
tail -12 $OUT/gpu_tests.txt
