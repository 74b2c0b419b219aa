"""Host staging of async checkpoint saves: one host copy of the state, allocated at the first async
save and reused by every later one (trainer/checkpoint.py's CheckpointManager.save)."""

from __future__ import annotations

import inspect
from typing import Any

import torch
import torch.distributed.checkpoint as dcp


def make_async_stager(on_cuda: bool, shared: bool = False) -> tuple[Any | None, str]:
    """(stager, what it does) for dcp.async_save: the host copy of the state is allocated on the first
    async save and reused by every later one, pinned with non-blocking copies on CUDA, and in shared
    memory when `shared` (a writer process then maps it instead of receiving a pickled copy).

    Without reuse, each async save allocated the whole state again (48 GB per rank for Llama-3 8B on
    2 ranks) in pageable memory, where device-to-host copies are slow and the first touch of fresh
    host pages is slow too. DefaultStager (torch >= 2.9) caches one host storage per source storage.
    Its own staging thread stays off (use_async_staging=False): staging returns only when the copy is
    done, so the next optimizer step cannot change what is written. Returns (None, reason) where
    this torch lacks the API, or where a probe finds that its stager cannot stage twice into one
    host copy: DCP's writer then copies into fresh CPU memory on every save.
    """
    try:
        from torch.distributed.checkpoint.staging import DefaultStager, StagingOptions
    except ImportError:
        DefaultStager = None  # noqa: N806
    if DefaultStager is None or "async_stager" not in inspect.signature(dcp.async_save).parameters:
        return None, (f"torch {torch.__version__} has no DefaultStager / async_save(async_stager=): "
                      "each async save stages into fresh, unpinned CPU memory")

    class ReusedStager(DefaultStager):
        # Staging is synchronous, so async_save has nothing to synchronize afterwards (and newer
        # torch deprecates the synchronize_staging call it would make).
        _synchronize_after_execute = False

        def _stage(self, state_dict, **kwargs):
            # torch 2.11 closes the inner stager after every stage: that drops the cached host copy
            # and empties the copier table, so the next save raised KeyError(<class 'type'>). Keep
            # it open; this stager lives for the run and is closed once, at the end (close()).
            inner = getattr(self, "_state_dict_stager", None)
            if inner is None:
                return super()._stage(state_dict, **kwargs)
            inner.close = _keep_open
            try:
                return super()._stage(state_dict, **kwargs)
            finally:
                del inner.close  # back to the class's close, for the real close at the end

    # Pinning and non-blocking copies need CUDA (DefaultStager refuses non_blocking without an
    # accelerator); on CPU the cached copy is plain host memory.
    options = StagingOptions(use_pinned_memory=on_cuda, use_shared_memory=shared,
                             use_async_staging=False, use_non_blocking_copy=on_cuda)
    problem = _reuse_problem(ReusedStager, shared)
    if problem is not None:
        return None, (f"torch {torch.__version__}'s DefaultStager cannot stage twice ({problem}): "
                      "each async save stages into fresh, unpinned CPU memory")
    what = ("pinned host memory, allocated once and reused, non-blocking device-to-host copies"
            if on_cuda else "CPU memory allocated once and reused (no CUDA: not pinned)")
    if shared:
        what += ", in shared memory (read by the writer process)"
    return ReusedStager(options), what


def _keep_open() -> None:
    pass


def _reuse_problem(stager_cls: Any, shared: bool = False) -> str | None:
    """Why a stager of this class cannot stage a small CPU state twice into the same host copy
    (None: it can). Checked once per run, so a torch whose staging internals differ from the ones
    ReusedStager knows falls back to fresh copies instead of failing at the second checkpoint."""
    from torch.distributed.checkpoint.staging import StagingOptions

    probe = stager_cls(StagingOptions(use_pinned_memory=False, use_shared_memory=shared,
                                      use_async_staging=False, use_non_blocking_copy=False))
    src = {"t": torch.arange(4.0), "meta": {"step": 1, "name": "probe", "pair": (1, 2.0)}}
    try:
        first = probe.stage(src)["t"]
        src["t"].add_(1)
        second = probe.stage(src)
        if not torch.equal(second["t"], src["t"]) or second["meta"] != src["meta"]:
            return "the second copy differs from its source"
        if first.untyped_storage().data_ptr() != second["t"].untyped_storage().data_ptr():
            return "the host copy was not reused"
    except Exception as exc:  # noqa: BLE001 - any failure means: do not reuse
        return f"{type(exc).__name__}: {exc}"
    finally:
        probe.close()
    return None
