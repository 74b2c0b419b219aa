"""The single-tensor collectives under the name each supported PyTorch prefers.

torch 2.13 and 2.14 have `all_gather_single` and `reduce_scatter_single`, and 2.14 deprecates the
old `all_gather_into_tensor` and `reduce_scatter_tensor` (a FutureWarning); 2.11 has only the old
names. Same arguments either way.
"""
import torch.distributed as dist

all_gather_single = getattr(dist, "all_gather_single", None) or dist.all_gather_into_tensor
reduce_scatter_single = getattr(dist, "reduce_scatter_single", None) or dist.reduce_scatter_tensor
