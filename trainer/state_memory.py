"""Start-up check that each rank's training state fits in its memory, before any of it exists.

The model is on the meta device and already parallelized here, so each parameter's local shard is
known. Training keeps, per parameter element, the parameter and, when it is trained, its gradient
and AdamW's two moments, all in the parameter's dtype (FSDP2 reduce-scatters gradients into the
sharded parameter's dtype).
That sum is a lower bound: activations, communication buffers and the allocator's slack come on
top. Refusing only when the lower bound exceeds what the device has never refuses a run that could
have fitted, and it replaces what a user would otherwise meet: on CPU the kernel's OOM killer
(torchrun reports `exitcode -9` and nothing else), on a GPU a CUDA OOM after the weights were
initialised, one rank at a time.

Ranks of one host share its RAM on CPU, so there the check adds the needs of the host's ranks; a GPU
rank is checked against its own device. Every rank gathers every rank's figures and decides the
same way, so all of them stop (or none), naming the worst rank.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch.distributed.tensor import DTensor

from trainer.checkpoint_memory import mem_available

GiB = 2**30
# A trained parameter's gradient, AdamW exp_avg and exp_avg_sq: each as large as its local shard.
TRAINED_COPIES = 3


@dataclass(frozen=True)
class RankMemory:
    rank: int
    host: str
    device: str      # "cpu" or "cuda:N"
    need: int        # bytes of this rank's parameter, gradient and optimizer-state shards
    available: int | None  # bytes free on its GPU, or the host's MemAvailable on CPU; None: unknown


def state_bytes(model: torch.nn.Module) -> int:
    """Bytes of the training state of `model`'s local parameter shards (meta tensors are fine)."""
    total = 0
    for p in model.parameters():
        local = p.to_local() if isinstance(p, DTensor) else p
        copies = 1 + (TRAINED_COPIES if p.requires_grad else 0)
        total += copies * local.numel() * local.element_size()
    return total


def device_available(device: torch.device) -> int | None:
    """Free bytes of a GPU, or the host's MemAvailable for the CPU (None where not reported)."""
    if device.type == "cuda":
        free, _ = torch.cuda.mem_get_info(device)
        return int(free)
    return mem_available()


def shortfall(rows: list[RankMemory]) -> str | None:
    """The message for the worst rank (or CPU host) whose need exceeds what it has, else None."""
    worst: tuple[float, str] | None = None
    hosts: dict[str, list[RankMemory]] = {}
    for r in rows:
        if r.device == "cpu":
            hosts.setdefault(r.host, []).append(r)
        elif r.available is not None and r.need > r.available:
            text = (f"rank {r.rank} ({r.host}, {r.device}) needs at least {r.need / GiB:.1f} GiB for its "
                    f"shards of the parameters, gradients and AdamW moments, but the GPU has "
                    f"{r.available / GiB:.1f} GiB free. Shard the model over more GPUs "
                    f"(parallelism.data_parallel_shard_degree, tensor_parallel_degree)")
            worst = max(worst or (0.0, ""), (r.need / max(r.available, 1), text))
    for host, ranks in hosts.items():
        # Each rank read MemAvailable at its own moment: the largest reading, so as never to refuse
        # a run for another rank's allocation in between.
        readings = [r.available for r in ranks if r.available is not None]
        need, available = sum(r.need for r in ranks), max(readings) if readings else None
        if available is not None and need > available:
            text = (f"the {len(ranks)} CPU rank(s) on {host} need at least {need / GiB:.1f} GiB together "
                    f"for their shards of the parameters, gradients and AdamW moments, but the host has "
                    f"{available / GiB:.1f} GiB available (MemAvailable; swap not counted). More ranks on "
                    f"one host share its RAM: spread them over more hosts, or train on GPUs")
            worst = max(worst or (0.0, ""), (need / max(available, 1), text))
    if worst is None:
        return None
    return (f"the training state does not fit: {worst[1]}, or train a smaller model (e.g. "
            f"--model.overrides.n_layers=N). Activations need memory on top of this state")


def check_state_fits(model: torch.nn.Module, device: torch.device) -> None:
    """Raise RuntimeError on every rank when some rank's training state cannot fit (collective)."""
    mine = RankMemory(dist.get_rank(), socket.gethostname(), str(device), state_bytes(model),
                      device_available(device))
    rows: list[RankMemory | None] = [None] * dist.get_world_size()
    dist.all_gather_object(rows, mine)
    message = shortfall([r for r in rows if r is not None])
    if message is not None:
        raise RuntimeError(message)
