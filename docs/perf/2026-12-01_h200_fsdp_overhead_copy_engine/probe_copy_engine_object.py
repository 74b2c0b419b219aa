"""Session 14: trainer/parallel/fsdp_comm.py's all-gather object on torch 2.11, one rank, under
expandable segments (as the benchmark rows run): allocate from the NCCL symmetric pool, gather, reuse."""
import os, torch, torch.distributed as dist
from trainer.parallel.fsdp_comm import set_cta_policy_env, make_symmetric_all_gather, check_symmetric_memory_supported
os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT="29534")
set_cta_policy_env("copy_engine")
print("PYTORCH_CUDA_ALLOC_CONF", os.environ.get("PYTORCH_CUDA_ALLOC_CONF"), "NCCL_CTA_POLICY", os.environ["NCCL_CTA_POLICY"])
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
g = dist.group.WORLD
check_symmetric_memory_supported("parallelism.fsdp_all_gather = 'copy_engine'", "cuda", g)
comm = make_symmetric_all_gather()
dev = torch.device("cuda:0")
ptrs = []
for i in range(4):
    out = comm.allocate((3 << 20,), dtype=torch.bfloat16, device=dev)
    inp = out.narrow(0, 0, 3 << 20).fill_(i + 1)
    comm(out, inp, g)
    torch.cuda.synchronize()
    ptrs.append(out.data_ptr())
    assert float(out.float().mean()) == i + 1
    del out, inp
big = comm.allocate((1 << 28,), dtype=torch.bfloat16, device=dev)  # 512 MiB, a 70B-layer-sized gather
comm(big, big.narrow(0, 0, 1 << 28).fill_(5), g)
torch.cuda.synchronize()
print("calls", comm.calls, "distinct buffers for 4 same-size gathers", len(set(ptrs)), "big ok", float(big[-1]))
dist.destroy_process_group()
# the reduce-scatter object too (one rank: output = input)
os.environ["MASTER_PORT"] = "29535"
dist.init_process_group("nccl", rank=0, world_size=1, device_id=torch.device("cuda:0"))
from trainer.parallel.fsdp_comm import make_symmetric_reduce_scatter
rs = make_symmetric_reduce_scatter()
g = dist.group.WORLD
src = rs.allocate((1 << 20,), dtype=torch.float32, device=dev).fill_(7)
dst = rs.allocate((1 << 20,), dtype=torch.float32, device=dev)
rs(dst, src, g, dist.ReduceOp.SUM)
torch.cuda.synchronize()
print("reduce-scatter object ok", float(dst.mean()), "calls", rs.calls)
dist.destroy_process_group()
