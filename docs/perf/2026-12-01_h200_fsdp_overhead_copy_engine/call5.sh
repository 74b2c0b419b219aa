#!/bin/bash
# Session 14, 1 x H200: the fixed trainer path with both symmetric settings on one rank (no effect,
# said once), and the CPU routing/unit tests under torch 2.11 (the device's torch).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
timeout 150 ./scripts/train.sh --training.steps=3 --run.dump_folder=/tmp/s14runs --run.name=ce \
  --parallelism.fsdp_all_gather=copy_engine --parallelism.fsdp_reduce_scatter=symmetric_memory > $OUT/train_symm.log 2>&1; echo "train symm rc $?"
grep -iE "symmetric|copy_engine|step +3" $OUT/train_symm.log | head -4
timeout 300 python3 -m pytest -q tests/unit/test_fsdp_comm.py tests/distributed/test_fsdp_custom_collectives.py > $OUT/routing_211.txt 2>&1; echo "routing rc $?"; tail -3 $OUT/routing_211.txt
