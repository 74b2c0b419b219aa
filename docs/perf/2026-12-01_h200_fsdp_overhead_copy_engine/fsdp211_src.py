"""Session 14: how torch 2.11's FSDP2 uses the custom comm objects (allocate for which buffers)."""
import inspect
import torch.distributed.fsdp._fully_shard._fsdp_collectives as c
for fn in ("foreach_all_gather", "foreach_reduce"):
    src = inspect.getsource(getattr(c, fn))
    print("==", fn)
    for i, line in enumerate(src.splitlines()):
        if any(k in line for k in ("allocate", "new_empty", "all_gather_comm", "reduce_scatter_comm(", "torch.empty")):
            print(i, line.strip())
