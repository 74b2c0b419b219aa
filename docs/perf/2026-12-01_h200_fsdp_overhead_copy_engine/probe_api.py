"""What this torch/NCCL offers for copy-engine (zero-SM) FSDP all-gathers (session 14 probe)."""
import os, torch, torch.distributed as dist
from torch.distributed.fsdp import FSDPModule
import torch.distributed._symmetric_memory as symm_mem
print("torch", torch.__version__, "nccl", torch.cuda.nccl.version())
for n in ["set_symm_mem_for_comm", "set_custom_all_gather", "set_custom_reduce_scatter",
          "set_allocate_memory_from_process_group_for_comm", "set_force_sum_reduction_for_comms"]:
    print("FSDPModule." + n, hasattr(FSDPModule, n))
for n in ["set_backend", "get_mem_pool", "rendezvous", "empty", "is_nvshmem_available"]:
    print("symm_mem." + n, hasattr(symm_mem, n))
print("ProcessGroupNCCL.NCCL_CTA_POLICY_ZERO", hasattr(dist.ProcessGroupNCCL, "NCCL_CTA_POLICY_ZERO"))
try:
    import torch.distributed.fsdp._fully_shard._fsdp_collectives as c
    print("SymmMemAllGather", hasattr(c, "SymmMemAllGather"))
except Exception as e:
    print("collectives import", e)
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29533", NCCL_CTA_POLICY="2")
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
try:
    symm_mem.set_backend("NCCL")
    pool = symm_mem.get_mem_pool(torch.device("cuda:0"))
    with torch.cuda.use_mem_pool(pool):
        out = torch.empty(1 << 20, dtype=torch.bfloat16, device="cuda")
    symm_mem.rendezvous(out, group=dist.group.WORLD.group_name)
    inp = out.narrow(0, 0, 1 << 20).fill_(3)
    dist.all_gather_into_tensor(out, inp)
    torch.cuda.synchronize()
    print("1-rank symm-mem all-gather ok", float(out.float().mean()))
except Exception as e:
    print("symm-mem path failed:", type(e).__name__, str(e)[:300])
dist.destroy_process_group()
