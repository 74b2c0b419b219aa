#!/bin/bash
# Session 14, 1 x H200 (torch 2.11): the refactored symmetric objects on one rank, and the CPU
# routing test with the GPU hidden (gloo worlds; on a GPU machine the trainer would pick CUDA).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 python3 docs/perf/2026-12-01_h200_fsdp_overhead_copy_engine/probe_copy_engine_object.py 2>&1 | grep -v Warn | tail -3; echo "probe rc ${PIPESTATUS[0]}"
CUDA_VISIBLE_DEVICES= timeout 300 python3 -m pytest -q tests/unit/test_fsdp_comm.py tests/distributed/test_fsdp_custom_collectives.py > $OUT/routing_211.txt 2>&1; echo "routing rc $?"; tail -3 $OUT/routing_211.txt
