"""Process-group start-up and hang safety: the only place titankit calls init_process_group."""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import torch
import torch.distributed as dist

from trainer.config.schema import Comm
from trainer.log import logger
from trainer.parallel.fsdp_comm import set_cta_policy_env
from trainer.parallel.dims import env_local_rank


def on_rank0(fn: Callable[[], Any], rank: int, group: dist.ProcessGroup | None = None) -> Any:
    """Run fn on rank 0 and give its result to every rank of `group`; an error there is raised on
    all ranks (instead of leaving the others waiting in the next collective until a timeout)."""
    box: list[Any] = [None]
    if rank == 0:
        try:
            box[0] = ("ok", fn())
        except Exception as exc:
            box[0] = ("error", type(exc) is ValueError, f"{exc}")
    dist.broadcast_object_list(box, src=0, group=group)
    if box[0][0] == "error":
        _, is_value_error, message = box[0]
        raise (ValueError if is_value_error else RuntimeError)(message)
    return box[0][1]


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def set_nccl_env(comm: Comm, run_dir: str, fsdp_all_gather: str = "nccl") -> None:
    """Defaults that turn a hung collective into a clear error with a trace, instead of a silent hang,
    and the CTA policy that copy-engine all-gathers need (trainer/parallel/fsdp_comm.py).

    Set before the process group starts; a value the user exported wins.
    """
    set_cta_policy_env(fsdp_all_gather)
    os.environ.setdefault("TORCH_NCCL_ASYNC_ERROR_HANDLING", "3")  # abort the comm, then raise
    if comm.trace_buf_size > 0:
        os.environ.setdefault("TORCH_FR_BUFFER_SIZE", str(comm.trace_buf_size))
        os.environ.setdefault("TORCH_NCCL_DUMP_ON_TIMEOUT", "1")
        os.environ.setdefault("TORCH_FR_DUMP_TEMP_FILE", os.path.join(run_dir, "comm_trace", "rank_"))
        os.makedirs(os.path.join(run_dir, "comm_trace"), exist_ok=True)
    # Never use NVLink multicast: NVLS can take shared hosts' GPUs down (see the device notes).
    os.environ.setdefault("NCCL_NVLS_ENABLE", "0")
    os.environ.setdefault("TORCH_SYMM_MEM_DISABLE_MULTICAST", "1")


def _local_gpu() -> int:
    """This process's GPU: LOCAL_RANK, which must name a visible device (CUDA would only say
    "invalid device ordinal", on one rank, after the others have started waiting for it)."""
    local, count = env_local_rank(), torch.cuda.device_count()
    if local >= count:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        seen = f" (CUDA_VISIBLE_DEVICES={visible!r})" if visible is not None else ""
        raise RuntimeError(
            f"rank {os.environ.get('RANK', '?')}: LOCAL_RANK={local}, but this node shows {count} "
            f"CUDA device(s){seen}. Start at most {count} process(es) per node "
            f"(torchrun --nproc_per_node={count}, or NGPU={count} for scripts/train.sh), "
            "or hide the GPUs (CUDA_VISIBLE_DEVICES=) to train on CPU with gloo. A launcher that "
            "gives each process its own GPU (Slurm --gpus-per-task=1) needs one torchrun per node "
            "with all of the node's GPUs instead, as scripts/multinode.sbatch does.")
    return local


def init_distributed(comm: Comm, run_dir: str, fsdp_all_gather: str = "nccl") -> torch.device:
    """Start the default process group (gloo on CPU; NCCL for CUDA tensors plus gloo for CPU ones).

    A plain `python -m trainer.train` (no torchrun) becomes a 1-rank group, so every code path is the
    same with one process or many.
    """
    if not dist.is_available():
        raise RuntimeError("torch.distributed is not available in this PyTorch build")
    if "RANK" not in os.environ:
        os.environ.update(RANK="0", WORLD_SIZE="1", LOCAL_RANK="0",
                          MASTER_ADDR="127.0.0.1", MASTER_PORT=str(_free_port()))
    if torch.cuda.is_available():
        device = torch.device("cuda", _local_gpu())
        torch.cuda.set_device(device)
        set_nccl_env(comm, run_dir, fsdp_all_gather)
        backend = "cpu:gloo,cuda:nccl"
    else:
        device = torch.device("cpu")
        backend = "gloo"
    if not dist.is_initialized():
        kwargs = {"device_id": device} if device.type == "cuda" else {}
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=comm.init_timeout_seconds),
                                **kwargs)
    logger.info(f"process group: {backend}, world {dist.get_world_size()}, device {device}")
    return device


def set_train_timeout(comm: Comm, mesh) -> None:
    """After the first step (compiles, NCCL warm-up) hangs should fail fast: shorten the timeouts."""
    timeout = timedelta(seconds=comm.train_timeout_seconds)
    # torch 2.14 made the private setter public (the old name warns there); 2.11-2.13 have only it.
    set_timeout = getattr(dist, "set_timeout", None) or getattr(dist.distributed_c10d, "_set_pg_timeout", None)
    if set_timeout is None:
        logger.warning("this PyTorch cannot change a process group's timeout; keeping the init timeout")
        return
    groups = [None] + list(mesh.get_all_groups())
    for group in groups:
        try:
            set_timeout(timeout, group)
        except (RuntimeError, ValueError) as exc:  # some backends (gloo) refuse: keep theirs
            logger.debug(f"timeout unchanged for a group: {exc}")


def destroy_distributed() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


# gloo's words for a collective that failed because of another rank: its process ended (or its
# connection broke), or it never joined within the timeout. gloo raises a plain RuntimeError whose
# text carries the source location first and an emoji last; only the matched words are kept.
_PEER_GONE = re.compile(r"Connection (?:closed|reset) by peer(?: \[[^\]]*\]:\d+)?")
_TIMED_OUT = re.compile(r"Timed out waiting \d+ms for \w+ operation to complete")


def peer_failure(exc: BaseException, when: str) -> str | None:
    """One line for a collective that failed because of another rank, else None. `when` starts
    the line: "step 3", "start-up".

    Such a rank's traceback (gloo's "Connection closed by peer", 60 lines deep in FSDP) reads as
    its own failure, and torchrun's summary often names it as the root cause, as it exits within
    the same second as the rank that failed first.
    """
    if not isinstance(exc, RuntimeError):
        return None
    text = str(exc)
    if m := _PEER_GONE.search(text):
        return (f"{when}: another rank stopped (its process ended or its connection broke), so "
                f"this rank's collective failed; that rank's own error, earlier in the log, is the "
                f"cause (gloo: {m.group(0)})")
    if m := _TIMED_OUT.search(text):
        return (f"{when}: a collective timed out: another rank is stuck, far slower, or "
                f"stopped; its log says which (the wait is comm.init_timeout_seconds until the "
                f"first step is done, comm.train_timeout_seconds after it) (gloo: {m.group(0)})")
    return None
