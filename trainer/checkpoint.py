"""Checkpoints: DCP save/load of the whole training state, step folders, retention, async save,
resume and preemption (DESIGN.md section 6).

Layout: {run_dir}/{checkpoint.folder}/step-N/ holds one DCP checkpoint with these top-level keys:
  model         get_model_state_dict: DTensor shards under FSDP/TP, so a load reshards to any layout
  optimizer     get_optimizer_state_dict (keyed by parameter name, layout-independent too)
  lr_scheduler  the scheduler's state_dict, pickled into one bytes item
  data          the sample stream's state, identical on all ranks (stored once): {"next_index": int,
                "identity": JSON of what defines the stream (trainer/data/identity.py)}
  train         {"step", "tokens_seen", "world_size", "model_identity": JSON of the model's settings
                (trainer/models/identity.py), "launch_config": the run folder's file holding the
                resolved config of the launch that saved it (config.toml, config_0002.toml, ...)}
  rng           {"rank<r>": {"python", "numpy", "torch"[, "cuda"]}}: each rank saves and loads its own
Bytes items with the same key on every rank are written by one rank only (DCP de-duplicates them).

Start = resume: a complete step folder of this run wins (the newest, or checkpoint.load_step: a rewind
applied once per checkpoint folder, recorded in load_step.json, _choose_load_step); else
checkpoint.initial_load_path; else a fresh start. A load of more than weights continues the saved
data stream, so it first checks that this run reads the same stream (_check_stream); a resume of the
run's own checkpoints also checks that it builds the same model (_check_model). See
trainer/checkpoint_folders.py for what "complete" means, trainer/checkpoint_checksums.py for the
checksums every save records and every load checks (_verify), and trainer/preemption.py for SIGTERM /
SIGUSR1.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import pickle
import random
import signal
import socket
import time
from concurrent.futures import Future
from dataclasses import dataclass
from datetime import timedelta
from pathlib import Path
from typing import Any, Callable, Iterator

import numpy as np
import torch
import torch.distributed as dist
import torch.distributed.checkpoint as dcp
from torch.distributed.checkpoint import FileSystemReader, FileSystemWriter
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.state_dict import (
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)

try:
    from torch.distributed.checkpoint.state_dict_saver import AsyncCheckpointerType
except ImportError:  # an older torch: async saves are written by a thread
    AsyncCheckpointerType = None  # type: ignore[assignment,misc]  # noqa: N816

from trainer.checkpoint_checksums import Recorded, RecordingWriter, recorded, verify_step
from trainer.checkpoint_folders import (
    LOAD_STEP_RECORD,
    apply_retention,
    check_model_fits,
    complete_step_folders,
    has_section,
    incomplete_reason,
    list_step_folders,
    read_load_step_record,
    read_metadata,
    remove_partial,
    resolve_checkpoint,
    section_template,
    set_aside,
    set_aside_note,
    step_folder,
    unsaved_rewind,
    write_load_step_record,
    write_problem,
)
from trainer.checkpoint_errors import (
    CheckpointReadError,
    CheckpointWriteError,
    read_failure,
    size,
    write_failure,
)
from trainer.checkpoint_memory import (
    RAM_FILESYSTEMS,
    async_shortfall,
    filesystem_type,
    mem_available,
    raise_open_file_limit,
    shm_free,
    state_bytes,
    storage_count,
    writer_process_shortfall,
)
from trainer.checkpoint_staging import make_async_stager
from trainer.data import identity as stream_id
from trainer.distributed import on_rank0
from trainer.log import logger
from trainer.models import identity as model_id
from trainer.optim import config_hyperparameters, keep_config_hyperparameters
from trainer.parallel.dims import env_local_rank
from trainer.preemption import PreemptionWatcher, stop_label

FULL_SECTIONS = ("optimizer", "lr_scheduler", "data", "train")


def capture_rng() -> dict[str, Any]:
    """This rank's generator states (python, numpy, torch CPU, and CUDA when in use)."""
    state: dict[str, Any] = {
        "python": random.getstate(),
        "numpy": np.random.get_state(),
        "torch": torch.get_rng_state(),  # a copy: later draws do not change what is saved
    }
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state()
    return state


def restore_rng(state: dict[str, Any]) -> None:
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(state["torch"])
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"])


def reseed_rng(seed: int, step: int, rank: int) -> None:
    """Deterministic fresh generators for a rank that has no saved state (world size grew)."""
    derived = ((seed * 1_000_003 + step) * 1_000_003 + rank) % (2**63 - 1)
    random.seed(derived)
    np.random.seed(derived % 2**32)
    torch.manual_seed(derived)  # also seeds every CUDA device


# The writer process inherits a blocked signal mask from the thread that starts it, which inherits it
# from the thread that called async_save: SIGUSR1 (the preemption signal, which Slurm's --signal
# without B: sends to every process of the job's steps) then cannot end a writer in the middle of a
# write. SIGTERM stays deliverable: multiprocessing stops daemon processes with it at exit.
_CHILD_BLOCKED_SIGNALS: tuple[int, ...] = (signal.SIGUSR1,) if hasattr(signal, "SIGUSR1") else ()


@contextlib.contextmanager
def _signals_blocked(signals: tuple[int, ...]) -> Iterator[None]:
    """Block `signals` in this thread (and threads it starts) for the duration. A signal sent to the
    process meanwhile is taken by another thread or stays pending: Python's handler still runs."""
    if not signals or not hasattr(signal, "pthread_sigmask"):
        yield
        return
    before = signal.pthread_sigmask(signal.SIG_BLOCK, signals)
    try:
        yield
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, before)


@dataclass
class _Pending:
    """An async save in flight."""

    step: int
    path: Path
    future: Future  # DCP's write, this rank's checksums included (RecordingWriter)
    started: float
    staged_s: float
    rank_bytes: int | None = None  # what this rank writes, for the message of a failed write


class CheckpointManager:
    """Saves and restores a Trainer's state; the Trainer calls load(), maybe_save(), preempted(), close().

    Uses of the trainer: cfg, run_dir, model, optimizer, lr_scheduler, stream, step, tokens_seen,
    data_identity (trainer/data/identity.py's stream_identity of the run), model_identity
    (trainer/models/identity.py's model_identity of the run), launch_config (the name of the run
    folder's file with this launch's config: trainer.py's record_launch_config).
    """

    def __init__(self, trainer: Any) -> None:
        self.trainer = trainer
        self.cfg = trainer.cfg.checkpoint
        self.enabled = bool(self.cfg.enable)
        self.root = Path(trainer.run_dir) / self.cfg.folder
        self.rank = dist.get_rank()
        self.world_size = dist.get_world_size()
        self.async_mode = self.cfg.async_mode == "async"
        # "process" or "thread"; the first async save may fall back to "thread" (_async_fits).
        self.writer = self.cfg.async_writer
        # DCP's own collectives (plan exchange, the final metadata gather) run on a dedicated gloo
        # group: the async writer thread then never interleaves with the training collectives, and a
        # slow write is not cut off by the short train timeout of the default group.
        timeout = timedelta(seconds=max(1800, trainer.cfg.comm.init_timeout_seconds))
        self.group = dist.new_group(backend="gloo", timeout=timeout)
        # Builds the storage writer of one step folder: DCP's, recording each rank's checksums
        # before .metadata (trainer/checkpoint_checksums.py); tests swap in a slower one.
        self.writer_factory: Callable[[str], FileSystemWriter] = RecordingWriter
        self._pending: _Pending | None = None
        self._last_saved = -1
        # Built on the first async save (it needs to know where the model lives); its host buffers
        # are overwritten by the next async save, which is safe only because save() first waits for
        # the write in flight (_wait).
        self._stager: Any | None = None
        self._stager_checked = False
        self._async_verdict: bool | None = None  # set by the first async save (_async_fits)
        # The step this run started from (load), whether its first save has set aside the complete
        # folders after it (_prepare), and, on rank 0, the checkpoint.load_step rewind this run
        # applied (the record entry that its first save completes; _choose_start / _record_rewind).
        self._start_step = 0
        self._swept = False
        self._rewind: dict[str, Any] | None = None
        # The trainer's watcher when it has one: it has been recording since the process started.
        self.watcher = (getattr(trainer, "preemption", None) or PreemptionWatcher()) if self.enabled else None
        if self.enabled:
            self._check_folder()

    def _check_folder(self) -> None:
        """Collective, at start-up: the first rank of each node makes the checkpoint folder and
        writes a probe file into it, so that a folder that cannot take checkpoints (a file of that
        name, no permission, a read-only or full mount) stops the run now, on every rank, instead
        of at its first save, `interval` steps later. Each node probes because a mount may differ
        per node; the run folder has been made by rank 0 already (trainer/run_lock.py)."""
        mine = (socket.gethostname(), write_problem(self.root) if env_local_rank() == 0 else None)
        every: list[Any] = [None] * self.world_size
        dist.all_gather_object(every, mine, group=self.group)
        bad = [(r, host, why) for r, (host, why) in enumerate(every) if why is not None]
        if bad:
            r, host, why = bad[0]
            others = f" (and on {len(bad) - 1} more node(s))" if len(bad) > 1 else ""
            raise ValueError(
                f"checkpoint.folder = {self.cfg.folder!r}: checkpoints cannot be written into "
                f"{self.root}: {why} (found by rank {r} on {host}{others}). Make it a writable "
                "folder, or choose another checkpoint.folder, run.name or run.dump_folder")

    # ---- start = resume ------------------------------------------------------------------------
    def load(self) -> None:
        """Restore from this run's newest complete checkpoint (or load_step / initial_load_path)."""
        # One rank scans the folder and decides, so all ranks load the same checkpoint.
        path, model_only, source = self._on_rank0(self._choose_start)
        if path is None:
            logger.info(f"checkpoint: nothing to resume from in {self.root}; starting at step 0")
            return
        self._load(Path(path), model_only, initial=source == "initial")
        self._start_step = int(self.trainer.step)
        if source == "rewind":
            self._on_rank0(self._record_rewind)
        steps = int(self.trainer.cfg.training.steps)
        if not model_only and self._start_step >= steps and self.rank == 0:
            # The trainer's loop (while step < training.steps) would end at once without a word.
            past = "" if self._start_step == steps else " (lower than the step it was saved at)"
            logger.warning(
                f"checkpoint: this run is already complete: it resumed {path} at step "
                f"{self._start_step} and training.steps = {steps}{past}, so nothing is trained or "
                f"saved. To train further, raise training.steps above {self._start_step}.")

    def _on_rank0(self, fn: Callable[[], Any]) -> Any:
        return on_rank0(fn, self.rank, self.group)

    def _choose_start(self) -> tuple[str | None, bool, str | None]:
        """(folder, model_only, source) to start from, or (None, False, None); rank 0 only (it logs
        the skips). source: "resume" (this run's newest), "rewind" (checkpoint.load_step) or
        "initial" (checkpoint.initial_load_path)."""
        if self.enabled:
            complete = complete_step_folders(self.root)
            if self.cfg.load_step >= 0:
                return self._choose_load_step(self.cfg.load_step, complete)
            if complete:
                if self.cfg.initial_load_path:  # the documented rule, said where it applies
                    logger.info(f"checkpoint: resuming this run's own {complete[-1][1]}; "
                                "checkpoint.initial_load_path applies only to a run's first start "
                                f"and is not loaded ({self.cfg.initial_load_path})")
                return str(complete[-1][1]), False, "resume"
        if self.cfg.initial_load_path:
            return str(self._resolve_initial(Path(self.cfg.initial_load_path).expanduser())), \
                self.cfg.initial_load_model_only, "initial"
        return None, False, None

    def _choose_load_step(self, want: int,
                          complete: list[tuple[int, Path]]) -> tuple[str, bool, str]:
        """checkpoint.load_step rewinds once per checkpoint folder (README). The same load_step as
        the last recorded rewind, once that rewind's first save set the abandoned steps aside and
        complete steps after it exist, is the same command relaunched (a requeue, a restart): it
        continues from the newest instead of setting its own progress aside again."""
        rewinds = read_load_step_record(self.root)
        last = rewinds[-1] if rewinds else None
        newer = [(s, p) for s, p in complete if s > want]
        if last is not None and last["load_step"] == want and last.get("first_save") is not None \
                and newer:
            newest_step, newest = newer[-1]
            again = (f"to rewind to step {want} again, delete {self.root / LOAD_STEP_RECORD}"
                     if any(s == want for s, _ in complete) else
                     f"step-{want} itself has since been removed by keep_latest_k")
            before = last.get("newest_before")
            what = (f"rewound from step-{before} to step {want}" if before is not None else
                    f"started from step {want}")
            logger.warning(
                f"checkpoint.load_step = {want} is not applied again: this checkpoint folder "
                f"already {what} at {last.get('applied_at', '?')} (recorded in "
                f"{LOAD_STEP_RECORD}) and has saved newer checkpoints since; this relaunch "
                f"continues from the newest, step-{newest_step} ({again}; drop "
                "checkpoint.load_step to silence this)")
            return str(newest), False, "resume"
        for step, path in complete:
            if step == want:
                newest_step = complete[-1][0]
                self._rewind = {"load_step": want,
                                "newest_before": newest_step if newest_step > want else None,
                                "applied_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                                "first_save": None}
                if newest_step > want:
                    logger.warning(
                        f"checkpoint.load_step = {want}: rewinding from step-{newest_step} to "
                        f"step-{want}; the steps after it are renamed *.superseded at this run's "
                        f"first save, and {LOAD_STEP_RECORD} records the rewind, so relaunching "
                        "this command after that save continues from the newest checkpoint")
                return str(path), False, "rewind"
        steps = [s for s, _ in complete]
        raise ValueError(
            f"checkpoint.load_step = {want}: {step_folder(self.root, want)} is not a complete "
            f"checkpoint (complete ones in {self.root}: {steps or 'none'}); use -1 for the newest"
            f"{set_aside_note(self.root, want)}")

    def _record_rewind(self) -> None:
        """Rank 0, after the load_step checkpoint loaded: record the rewind (unless the record's
        last entry is this same rewind, applied again before its first save)."""
        entry = self._rewind
        if entry is None:
            return
        rewinds = read_load_step_record(self.root)
        if unsaved_rewind(rewinds, entry["load_step"]) is None:
            write_load_step_record(self.root, rewinds + [entry])

    def _resolve_initial(self, path: Path) -> Path:
        """initial_load_path may name a step-N folder or a folder of them (then: the newest)."""
        return resolve_checkpoint(path, f"checkpoint.initial_load_path = {str(path)!r}")

    def _load(self, path: Path, model_only: bool, initial: bool = False) -> None:
        t = self.trainer
        t0 = time.perf_counter()
        self._verify(path)  # before any rank reads a shard (_check_model below reads one)
        metadata = read_metadata(path)
        model_sd = get_model_state_dict(t.model)
        self._check_model(path, metadata, initial)  # a change that keeps every shape, too
        check_model_fits(metadata, model_sd, path)  # before any rank reads a tensor
        state: dict[str, Any] = {"model": model_sd}
        rng_key = f"rank{self.rank}"
        has_rng = False
        if not model_only:
            missing = [s for s in FULL_SECTIONS if not has_section(metadata, s)]
            if missing:
                raise ValueError(
                    f"checkpoint {path} holds no {', '.join(missing)} state (only weights?); to "
                    "start from its weights set checkpoint.initial_load_model_only = true")
            # The small sections first: a run that would train nothing, or reads another stream, is
            # refused before any rank spends minutes reading weights it would not use.
            small = self._load_sections(path, metadata, ("data", "train"))
            data, train = small["data"], small["train"]
            if initial:
                self._check_initial_step(path, int(train["step"]))
            self._check_stream(path, data)
            state["optimizer"] = get_optimizer_state_dict(t.model, t.optimizer)
            state["lr_scheduler"] = None  # one pickled bytes item
            has_rng = has_section(metadata, f"rng.{rng_key}")
            if has_rng:
                state["rng"] = {rng_key: section_template(metadata, f"rng.{rng_key}.")}
        self._read(state, path)
        set_model_state_dict(t.model, state["model"])
        if model_only:
            logger.info(f"checkpoint: loaded the model weights of {path} in "
                        f"{time.perf_counter() - t0:.2f}s; starting at step 0")
            return
        built = config_hyperparameters(t.optimizer, t.lr_scheduler)
        set_optimizer_state_dict(t.model, t.optimizer, state["optimizer"])
        t.lr_scheduler.load_state_dict(pickle.loads(state["lr_scheduler"]))
        changed = keep_config_hyperparameters(t.optimizer, t.lr_scheduler, built)
        t.stream.load_state_dict(data)
        t.step = int(train["step"])
        t.tokens_seen = int(train["tokens_seen"])
        saved_world = int(train.get("world_size", 0))
        if has_rng:
            restore_rng(state["rng"][rng_key])
        else:
            reseed_rng(t.cfg.run.seed, t.step, self.rank)
            logger.warning(f"checkpoint {path} was saved on {saved_world} ranks and has no RNG state "
                           f"for rank {self.rank}; its generators are reseeded from (run.seed, step, rank)")
        if self.rank == 0 and saved_world and saved_world != self.world_size:
            logger.warning(f"checkpoint {path} was saved on {saved_world} ranks and is loaded on "
                           f"{self.world_size}: weights and optimizer state are resharded")
        if changed and self.rank == 0 and t.step < t.cfg.training.steps:  # else nothing trains
            logger.warning(f"checkpoint: this config's optimizer settings differ from those {path} was "
                           f"saved with and apply from step {t.step + 1} on: " + "; ".join(changed))
        self._last_saved = t.step  # never rewrite the folder this run started from
        logger.info(f"checkpoint: resumed from {path} (step {t.step}, {t.tokens_seen:,} tokens "
                    f"seen, data at sample {t.stream.state_dict()}) in {time.perf_counter() - t0:.2f}s")

    def _check_initial_step(self, path: Path, saved: int) -> None:
        """initial_load_path with more than weights continues the saved step: one at or past
        training.steps would train nothing and save nothing (every rank reads the same verdict)."""
        steps = int(self.trainer.cfg.training.steps)
        if saved >= steps:
            raise ValueError(
                f"checkpoint.initial_load_path = {str(self.cfg.initial_load_path)!r}: {path} was "
                f"saved at step {saved} and initial_load_model_only = false continues from there, "
                f"but training.steps = {steps}: this run would train and save nothing. Raise "
                f"training.steps above {saved} to train on from it, or set "
                "checkpoint.initial_load_model_only = true to start at step 0 from its weights")

    def _check_model(self, path: Path, metadata: Any, initial: bool) -> None:
        """Refuse to resume this run's own checkpoint with other model settings: the shape check
        lets through head counts, RoPE and norm settings that keep every shape. A checkpoint of
        another run (initial_load_path, a fine-tune) loads wherever the shapes fit, as before; its
        differences get one INFO line. Every rank reads the same record and reaches one verdict."""
        if not has_section(metadata, "train.model_identity"):
            if not initial and self.rank == 0:
                logger.info(f"checkpoint {path} records no model settings (saved by an older "
                            "titankit): only the shapes of its weights are checked")
            return
        state: dict[str, Any] = {"train": {"model_identity": None}}  # one bytes item
        self._read(state, path)
        saved = model_id.loads(state["train"]["model_identity"], f"checkpoint {path}")
        current = self.trainer.model_identity
        keys = model_id.differences(saved, current)
        lines = model_id.describe(saved, current, keys)
        if keys and not initial:
            flavor = saved.get("flavor")
            note = (f" It was saved with model.flavor = {flavor!r} (this run: {current['flavor']!r})."
                    if keys != ["family"] and flavor not in (None, current.get("flavor")) else "")
            raise ValueError(
                f"checkpoint {path} was saved by a model with other settings than this run "
                "builds:\n  " + "\n  ".join(lines) + f"\nTo resume it, run with the saved values "
                f"({model_id.resume_hint(saved, keys)}).{note} To train the changed model from its "
                "weights on purpose, start a new run folder (another run.name) with "
                f"checkpoint.initial_load_path = '{path}' (it loads where the weight shapes fit).")
        changes = "; ".join(lines + model_id.unchecked_changes(saved, current))
        if changes and self.rank == 0:
            logger.info(f"checkpoint {path} was saved with other model settings ({changes}); "
                        + ("its weights load where their shapes fit" if initial else
                           "a resume may change these (same model function, or training settings)"))

    def _verify(self, path: Path) -> None:
        """Collective: step folder `path`'s files against their saved checksums (all ranks raise
        the same CheckpointReadError on damage), unless checkpoint.verify_checksums = false."""
        if self.cfg.verify_checksums:
            verify_step(path, self.root, self.rank, self.world_size, self.group)
        elif self.rank == 0:
            logger.info(f"checkpoint.verify_checksums = false: {path} is loaded without checking its "
                        "files against their checksums")

    def _read(self, state: dict[str, Any], path: Path) -> None:
        """dcp.load `state` from step folder `path` (collective). A shard that cannot be read fails
        on every rank alike (DCP gathers each rank's failure), so all raise the same error."""
        try:
            dcp.load(state, storage_reader=FileSystemReader(str(path)), process_group=self.group)
        except CheckpointException as exc:
            raise CheckpointReadError(read_failure(self.root, path, exc)) from exc

    def _load_sections(self, path: Path, metadata: Any, names: tuple[str, ...]) -> dict[str, Any]:
        state = {name: section_template(metadata, f"{name}.") for name in names}
        self._read(state, path)
        return state

    def _check_stream(self, path: Path, data: dict[str, Any]) -> None:
        """Refuse to continue the saved stream with other data settings (see identity.py), unless
        checkpoint.allow_data_change. Every rank reaches the same verdict (the saved identity is
        one item; the current one is agreed first), so all raise together and none waits."""
        current = self._agreed_identity()
        if data.get("identity") is None:
            if self.rank == 0:
                logger.warning(
                    f"checkpoint {path} records no data-stream identity (saved by an older titankit): "
                    f"this resume cannot check that {stream_id.config_keys()} are the ones it was "
                    "saved with")
            return
        saved = stream_id.loads(data["identity"], f"checkpoint {path}")
        keys = stream_id.differences(saved, current)
        if not keys:
            return
        lines = "\n  ".join(stream_id.describe(saved, current, keys))
        if not self.cfg.allow_data_change:
            raise ValueError(self._stream_error(path, saved, keys, lines))
        if self.rank == 0:
            logger.warning(
                f"checkpoint.allow_data_change = true: resuming {path} with a different data "
                f"stream:\n  {lines}\nIt continues at global sample {data.get('next_index')} of the "
                "new stream; checkpoints from now on record the new settings.")

    def _stream_error(self, path: Path, saved: dict[str, Any], keys: list[str], lines: str) -> str:
        hint = stream_id.resume_hint(saved, keys)
        batch = ""
        if "global_batch_size" in keys and self.trainer.cfg.training.global_batch_size == -1:
            batch = ("training.global_batch_size = -1 means local_batch_size x data-parallel "
                     "degree, so it changes with the number of ranks; set it explicitly (gradient "
                     "accumulation keeps it on fewer ranks). ")
        return (f"checkpoint {path} was saved from a different data stream than this run reads:\n"
                f"  {lines}\n{batch}To resume it exactly, run with the saved values"
                f"{' (' + hint + ')' if hint else ''}. To continue from its sample index with the "
                "new settings on purpose, set checkpoint.allow_data_change = true. To start a new "
                "stream from its weights only, use checkpoint.initial_load_path (with "
                "initial_load_model_only = true) in a new run folder.")

    def _agreed_identity(self) -> dict[str, Any]:
        """This run's stream identity, checked to be the same on every rank (each rank reads its
        own dataset: a node with another copy of the shards would train on other samples)."""
        mine = self.trainer.data_identity
        every: list[Any] = [None] * self.world_size
        dist.all_gather_object(every, mine, group=self.group)
        for r, other in enumerate(every):
            keys = stream_id.differences(every[0], other)
            if keys:
                lines = "; ".join(stream_id.describe(every[0], other, keys, ("rank 0", f"rank {r}")))
                raise ValueError(f"ranks read different data streams ({lines}); every rank must "
                                 "see the same dataset files and settings")
        return every[0]

    # ---- save ----------------------------------------------------------------------------------
    def after_step(self, step: int, last: bool = False) -> bool:
        """The trainer's call after every step (collective). True: a preemption signal reached some
        rank and this step is saved; stop training.

        The preemption check comes first: a signal sent to a whole process group also ends DCP's
        writer processes, and a regular save or poll that met their failed write first would raise
        before the preempted step could be saved.
        """
        if self.preempted():
            return True
        self.maybe_save(step, last)
        return False

    def maybe_save(self, step: int, last: bool = False) -> None:
        """Every `interval` steps and at the last; not when _poll leaves it to the next after_step."""
        if self.enabled and not self._poll() and self.saves_at(step, last):
            self.save(step, blocking=not self.async_mode)

    def saves_at(self, step: int, last: bool = False) -> bool:
        """Whether maybe_save saves after `step` (a preemption aside)."""
        return self.enabled and (step % self.cfg.interval == 0 or last)

    def save(self, step: int, blocking: bool = True) -> None:
        """Save the current state as step-{step}; async (blocking=False) returns once it is staged."""
        if step == self._last_saved:
            if blocking:
                self._wait()
            return
        self._wait()  # one save in flight at most; its retention runs before the next starts
        path = step_folder(self.root, step)
        self._prepare(step)
        state = self._state_dict(step)
        writer = self.writer_factory(str(path))
        t0 = time.perf_counter()
        if blocking or not self._async_fits(state):
            try:
                dcp.save(state, storage_writer=writer, process_group=self.group)
            except (Exception, CheckpointException) as exc:  # DCP's exception is a BaseException
                raise CheckpointWriteError(write_failure(self.root, path, exc, state_bytes(state))) \
                    from exc
            self._last_saved = step
            self._finish(step, path, t0, None, recorded(path, self.rank))
            return
        # async_save copies every tensor to host memory before it returns, so later optimizer steps
        # cannot change what is being written; the reused stager (or, on old torch, the writer
        # itself, a BlockingAsyncStager) makes that copy.
        stager = self._async_stager()
        kwargs: dict[str, Any] = {} if stager is None else {"async_stager": stager}
        blocked: tuple[int, ...] = ()
        if self.writer == "process":
            # DCP starts one writer process per rank at the first save and keeps it for the run;
            # the staged tensors reach it as shared-memory handles, not as pickled bytes.
            kwargs["async_checkpointer_type"] = AsyncCheckpointerType.PROCESS
            blocked = _CHILD_BLOCKED_SIGNALS
        with _signals_blocked(blocked):
            response = dcp.async_save(state, storage_writer=writer, process_group=self.group, **kwargs)
        # The writer records the checksums as part of the write, in the background too.
        future = getattr(response, "upload_completion", response)
        staged = time.perf_counter() - t0
        self._pending = _Pending(step, path, future, t0, staged, state_bytes(state))
        self._last_saved = step
        logger.info(f"checkpoint step-{step}: staged in {staged:.2f}s, writing in the background "
                    f"({'a writer process' if self.writer == 'process' else 'a writer thread'})")

    def _async_fits(self, state: dict[str, Any]) -> bool:
        """Collective, on the first async save: whether every node can hold the host copies.

        Otherwise async saves are turned off for the run (a warning says why), since the
        out-of-memory killer would end the ranks in the middle of a write."""
        if self._async_verdict is None:
            rank_bytes = state_bytes(state)
            reason = async_shortfall(
                rank_bytes, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), mem_available(),
                filesystem_type(self.root) in RAM_FILESYSTEMS)
            reasons: list[str | None] = [None] * self.world_size
            dist.all_gather_object(reasons, reason, group=self.group)
            bad = [(r, why) for r, why in enumerate(reasons) if why is not None]
            self._async_verdict = not bad
            if bad:
                self.async_mode = False
                if self.rank == 0:
                    r, why = bad[0]
                    logger.warning(
                        f"checkpoint.async_mode = 'async': on rank {r}, {why}. This run saves with "
                        f"blocking saves instead (checkpoint folder {self.root}). For async saves, "
                        "free host memory, run fewer ranks per node, or use a folder on disk.")
            elif self.writer == "process":
                self._check_writer_process(state, rank_bytes)
        return self._async_verdict

    def _check_writer_process(self, state: dict[str, Any], rank_bytes: int) -> None:
        """Collective: every rank must be able to hand its staged copy to a writer process, else all
        ranks write from a thread (DCP's writer processes form one group, so it is all or none)."""
        reason = None
        if (AsyncCheckpointerType is None
                or "async_checkpointer_type" not in inspect.signature(dcp.async_save).parameters):
            reason = f"torch {torch.__version__} has no async_save(async_checkpointer_type=)"
        else:
            # Each staged tensor holds a file open: raise the soft limit to the hard one first.
            limit = raise_open_file_limit()
            fds = len(os.listdir("/proc/self/fd")) if os.path.isdir("/proc/self/fd") else 0
            reason = writer_process_shortfall(
                rank_bytes, int(os.environ.get("LOCAL_WORLD_SIZE", "1")), shm_free(),
                storage_count(state), limit, fds)
        reasons: list[str | None] = [None] * self.world_size
        dist.all_gather_object(reasons, reason, group=self.group)
        bad = [(r, why) for r, why in enumerate(reasons) if why is not None]
        if bad:
            self.writer = "thread"
            if self.rank == 0:
                r, why = bad[0]
                logger.warning(
                    f"checkpoint.async_writer = 'process': on rank {r}, {why}. This run's async saves "
                    "are written by a thread of the training process instead.")

    def _async_stager(self) -> Any | None:
        if not self._stager_checked:
            self._stager_checked = True
            on_cuda = any(p.device.type == "cuda" for p in self.trainer.model.parameters())
            self._stager, what = make_async_stager(on_cuda, shared=self.writer == "process")
            if self._stager is not None:
                logger.info(f"checkpoint: async saves stage into {what}")
            else:
                logger.warning(f"checkpoint: {what}")
        return self._stager

    def _state_dict(self, step: int) -> dict[str, Any]:
        t = self.trainer
        data = {**t.stream.state_dict(), "identity": stream_id.dumps(t.data_identity)}
        # The stream state is saved once for all ranks: check the invariant that makes this right.
        states: list[Any] = [None] * self.world_size
        dist.all_gather_object(states, data, group=self.group)
        if any(s != data for s in states):
            raise RuntimeError(f"data stream states differ across ranks ({states}); they must be "
                               "identical for a resume to continue the same global stream")
        return {
            "model": get_model_state_dict(t.model),
            "optimizer": get_optimizer_state_dict(t.model, t.optimizer),
            "lr_scheduler": pickle.dumps(t.lr_scheduler.state_dict()),
            "data": dict(data),
            "train": {"step": int(step), "tokens_seen": int(t.tokens_seen),
                      "world_size": self.world_size,
                      "model_identity": model_id.dumps(t.model_identity),
                      "launch_config": str(t.launch_config)},
            "rng": {f"rank{self.rank}": capture_rng()},
        }

    def _prepare(self, step: int) -> None:
        """Rank 0 clears the way for step-{step} (all ranks wait); nothing complete is deleted."""

        def clear() -> None:
            self.root.mkdir(parents=True, exist_ok=True)
            target = step_folder(self.root, step)
            if not target.is_dir() and (target.exists() or target.is_symlink()):
                # A file or a broken link of this name is no checkpoint (resumes pass over it), but
                # DCP cannot make the folder there: the save would fail after `interval` steps of
                # training, and again after each relaunch. Keep it, under another name.
                what = "a broken link" if target.is_symlink() else "a file"
                set_aside(target, f"it is {what}, not a step folder, and this run saves step "
                                  f"{step} there")
            for s, path in list_step_folders(self.root):
                # The first save of a run also clears the complete steps after the one it started
                # from: they exist only after a rewind (checkpoint.load_step), belong to the
                # abandoned continuation and would otherwise win the next resume.
                if s < step and (self._swept or s <= self._start_step):
                    continue
                if incomplete_reason(path) is None:
                    set_aside(path, f"this run resumed from step {self._start_step} and now saves "
                                    f"step {step}")
                elif s == step:
                    # DCP would mix its new shards with the old ones. A partial folder of a later
                    # step stays: this run may never reach it, a resume skips it with a warning,
                    # and retention removes it once a newer complete step exists.
                    remove_partial(path)
            self._swept = True
            if self._rewind is not None:
                # The abandoned steps are aside: complete steps after load_step are this run's own
                # from now on, and a relaunch of the same command continues from them.
                rewinds = read_load_step_record(self.root)
                entry = unsaved_rewind(rewinds, self._rewind["load_step"])
                if entry is not None:
                    entry["first_save"] = step
                    write_load_step_record(self.root, rewinds)
                self._rewind = None

        self._on_rank0(clear)

    def _finish(self, step: int, path: Path, started: float, staged: float | None,
                record: Recorded) -> None:
        elapsed = time.perf_counter() - started
        if self.rank == 0:
            # Rank 0 alone: a failure here must not stop it while the other ranks train on, so it
            # is logged, and retention (which could delete the last good checkpoint) is skipped.
            reason = incomplete_reason(path)
            if reason is not None:
                logger.error(f"checkpoint {path} is incomplete right after saving ({reason}); it will "
                             "not be used for a resume, and no older checkpoint is removed")
                return
            try:
                apply_retention(self.root, self.cfg.keep_latest_k)
            except OSError as exc:
                logger.warning(f"checkpoint retention in {self.root} failed: {exc}")
        how = "saved" if staged is None else f"written in the background (staging {staged:.2f}s)"
        logger.info(f"checkpoint step-{step} {how} in {elapsed:.2f}s, of which {record.seconds:.2f}s "
                    f"for the checksums of rank {self.rank}'s {record.files} files "
                    f"({size(record.bytes)}): {path}")

    def _poll(self) -> bool:
        """Finish an async save that is done. True: it failed after this rank got a preemption
        signal, and the failure is left to the preemption save."""
        if self._pending is None or not self._pending.future.done():
            return False
        if self.watcher is None or self.watcher.received is None:
            self._wait()
            return False
        # This rank has a preemption signal that after_step has not agreed on yet (it came after
        # this step's check), and the signal may be what ended the write: the next step's check
        # handles the failure and saves the step instead of failing the run here.
        try:
            self._wait()
        except RuntimeError as exc:
            logger.error(f"{exc}; after a preemption signal: the preemption save follows")
            self._last_saved = -1
            return True
        return False

    def _wait(self) -> None:
        """Block until the async save in flight (if any) is complete, then apply retention."""
        pending, self._pending = self._pending, None
        if pending is None:
            return
        try:
            pending.future.result()
        except (Exception, CheckpointException) as exc:  # DCP's exception is a BaseException
            message = write_failure(self.root, pending.path, exc, pending.rank_bytes)
            raise CheckpointWriteError(f"async save: {message}") from exc
        self._finish(pending.step, pending.path, pending.started, pending.staged_s,
                     recorded(pending.path, self.rank))

    # ---- preemption and shutdown ---------------------------------------------------------------
    def relaunch_note(self, completed: int) -> str:
        """For a stop that saves nothing more (a second Ctrl-C) after step `completed`: where a
        relaunch continues, and the write in flight that the stop abandons."""
        complete = ([s for s, _ in complete_step_folders(self.root, warn=False)]
                    if self.enabled and self.root.is_dir() else [])
        newest = complete[-1] if complete else 0
        note = (f"a relaunch continues from step-{newest}" if complete
                else "this run has no complete checkpoint yet")
        if completed > newest:
            note += (f" (step {completed} is not saved)" if completed == newest + 1
                     else f" (steps {newest + 1}-{completed} are not saved)")
        if self._pending is not None and self._pending.step not in complete:
            note += (f"; the write of step-{self._pending.step} in flight is abandoned (a relaunch "
                     f"skips its folder)")
        return note

    def preempted(self) -> bool:
        """Collective: True once any rank got SIGTERM/SIGUSR1 (or Ctrl-C), after a blocking save of
        this step."""
        if self.watcher is None or not self.watcher.agreed():
            return False
        if self.rank == 0:
            logger.warning(f"{stop_label(self.watcher.agreed_signal)}: saving a checkpoint of step "
                           f"{self.trainer.step}")
        try:
            # The signal may also have ended the writer processes (launchers signal the whole
            # process group): a write they left unfinished must not stop the save of this step.
            self._wait()
        except RuntimeError as exc:
            logger.error(f"{exc}. The preempted step is saved now")
            self._last_saved = -1  # it may have been this very step: save it again below
        self.save(self.trainer.step, blocking=True)
        return True

    def close(self) -> None:
        """Wait for an async save in flight, free the staging memory, restore the signal handlers."""
        try:
            self._wait()
        finally:
            if self._stager is not None:
                self._stager.close()  # after _wait: the write in flight reads these buffers
                self._stager, self._stager_checked = None, False
            if self.watcher is not None:
                self.watcher.close()
