#!/bin/bash
# One GPU visible: the CPU (gloo) tests must still pass, and the GPU tests other than TK.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD
nvidia-smi --query-gpu=name,driver_version --format=csv,noheader > $OUT/env.txt
python3 -c "import torch,triton;print(torch.__version__,triton.__version__)" >> $OUT/env.txt
pip list 2>/dev/null | grep -i -E "pytest|wandb|tomli|hypothesis" >> $OUT/env.txt
timeout 540 python3 -m pytest -v -m "not gpu" tests -p no:cacheprovider --durations=10 > $OUT/notgpu.txt 2>&1
echo "rc=$?" >> $OUT/notgpu.txt
grep -E "PASSED|FAILED|ERROR|SKIPPED|XFAIL" $OUT/notgpu.txt | awk '{print $2}' | sort | uniq -c
tail -30 $OUT/notgpu.txt
