#!/bin/bash
# Session 14, 1 x H200: the 70B block alone at batch 1, 2 and 4 x 8192 tokens (no FSDP), to split the
# local-batch gain of 2f/2g into bigger kernels and FSDP's amortised per-micro-batch work.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
for b in 1 2 4; do
  timeout 150 python3 scripts/layer_probe.py --flavor 70B --batch $b --no-lone --out $OUT/probe_70b_b$b.md > $OUT/probe_b$b.log 2>&1
  echo "batch $b rc $?"; grep -E "^## base" $OUT/probe_70b_b$b.md; grep -E "^\| (GEMM|attention|elementwise)" $OUT/probe_70b_b$b.md
done
