#!/bin/bash
# Async checkpoints on the GPU with torch 2.11 (4 saves, resume exact); then the 4-rank CPU layout
# test that stopped the first call, with the GPU now hidden from its ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
timeout 200 python3 -m pytest -q -m gpu tests/gpu/test_checkpoint_gpu.py -p no:cacheprovider > $OUT/ckpt_gpu.txt 2>&1
echo "rc=$?" >> $OUT/ckpt_gpu.txt
/usr/bin/time -v timeout 300 python3 -m pytest -q "tests/distributed/test_layouts.py::test_layout_matches_single_rank[dp_shard2]" "tests/distributed/test_layouts.py::test_layout_matches_single_rank[dp_rep2_shard2]" -p no:cacheprovider --durations=5 > $OUT/layouts.txt 2>&1
echo "rc=$?" >> $OUT/layouts.txt
nproc >> $OUT/layouts.txt
tail -5 $OUT/ckpt_gpu.txt; grep -E "passed|failed|rc=|Elapsed|Maximum resident|slowest|s call|s setup" $OUT/layouts.txt
