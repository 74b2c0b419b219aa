#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
PYTORCH_CUDA_ALLOC_CONF=expandable_segments:True timeout 120 python3 docs/perf/2026-12-01_h200_fsdp_overhead_copy_engine/probe_copy_engine_object.py 2>&1 | grep -v Warn | tail -8; echo "expandable rc ${PIPESTATUS[0]}"
timeout 120 python3 docs/perf/2026-12-01_h200_fsdp_overhead_copy_engine/probe_copy_engine_object.py 2>&1 | grep -v Warn | tail -4; echo "plain rc ${PIPESTATUS[0]}"
