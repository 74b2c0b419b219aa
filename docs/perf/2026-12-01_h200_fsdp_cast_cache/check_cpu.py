"""CPU check of probe/sitecustomize.py: the same losses with and without the cast cache.

    for c in 0 1; do TITANKIT_PROBE_CAST_CACHE=$c TITANKIT_PROBE_CAST_CACHE_REPORT=1 \
        PYTHONPATH=docs/perf/2026-12-01_h200_fsdp_cast_cache/probe \
        torchrun --standalone --nproc_per_node=2 docs/perf/2026-12-01_h200_fsdp_cast_cache/check_cpu.py; done

Three FSDP2 units with bf16 parameters, fp32 reduction, 3 micro-batches per step, AdamW; rank 0
prints every step's loss (float.hex). The cache must hit inside a step and miss after every optimizer step.
"""
import torch
import torch.distributed as dist
from torch.distributed.fsdp import MixedPrecisionPolicy, fully_shard

dist.init_process_group("gloo")
rank = dist.get_rank()
torch.manual_seed(0)
model = torch.nn.Sequential(*[torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.GELU())
                              for _ in range(3)], torch.nn.Linear(64, 1))
mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32)
for block in model[:3]:
    fully_shard(block, mp_policy=mp)
fully_shard(model, mp_policy=mp)
opt = torch.optim.AdamW(model.parameters(), lr=1e-2, foreach=True)
gen = torch.Generator().manual_seed(1 + rank)
for step in range(6):
    opt.zero_grad()
    total = 0.0
    for _ in range(3):
        x = torch.randn(32, 64, generator=gen)
        loss = model(x).float().pow(2).mean() / 3
        loss.backward()
        total += loss.item()
    opt.step()
    if rank == 0:
        print(f"step {step} loss {total.hex()}", flush=True)  # exact, for a bitwise comparison
dist.destroy_process_group()
