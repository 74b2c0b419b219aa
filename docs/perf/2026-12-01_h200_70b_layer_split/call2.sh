#!/bin/bash
# Session 13 call 2 (1 x H200): one-GPU 70B layers, profile kept; FSDP resharding levers.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 PYTHONPATH=$PWD THUNDERKITTENS_ROOT=$PWD/.tk
S=scripts/bench_suites/h200_x1_70b_layers_noac.toml
A="--ngpu 1 --warmup 2 --steps 3 --timeout 115"
python3 scripts/bench_train.py --suite $S $A --profile --out $OUT/prof.md > $OUT/prof.log 2>&1; echo "prof rc $?"
python3 scripts/bench_train.py --suite $S $A --out $OUT/never.md --parallelism.fsdp_reshard_after_forward=never > $OUT/never.log 2>&1; echo "never rc $?"
python3 scripts/bench_train.py --suite $S $A --out $OUT/never_last.md --parallelism.fsdp_reshard_after_forward=never --parallelism.fsdp_reshard_after_backward=last_micro_batch > $OUT/never_last.log 2>&1; echo "never_last rc $?"
(cd $OUT && tar czf logs.tgz prof never never_last 2>/dev/null)
for f in prof never never_last; do echo "== $f"; grep -E "^\| 70B" $OUT/$f.md | awk -F"|" "{print \$2,\$10,\$13,\$16}"; grep per-layer $OUT/$f.md; done
