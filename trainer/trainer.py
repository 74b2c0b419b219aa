"""The Trainer: builds everything in a fixed order, then runs the train loop.

Build order (DESIGN.md section 2): config -> process group + mesh -> data -> model on meta ->
FP8 swap -> parallelize -> materialize + init -> optimizer + schedule -> metrics -> checkpoint (resume).
"""

from __future__ import annotations

import contextlib
import gc
import math
import os
import re
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.distributed.tensor import DTensor
from torch.profiler import record_function

from trainer.config import JobConfig, config_to_dict, config_to_toml, resolve_model_args, validate_config
from trainer.config.validate import check_device_backends
from trainer.data import SampleStream, build_dataset, build_tokenizer
from trainer.data.identity import stream_identity
from trainer.distributed import init_distributed, on_rank0, set_train_timeout
from trainer.files import atomic_write
from trainer.log import init_logging, logger
from trainer.gpu_monitor import GpuSampler
from trainer.metrics import MetricsLogger, StepMeter, resolve_peak_flops
from trainer.models import FAMILIES
from trainer.models.identity import model_identity
from trainer.optim import build_lr_scheduler, build_optimizer, clip_grads_, grad_norm
from trainer.parallel import parallelize
from trainer.parallel.dims import ParallelDims, env_world_size
from trainer.parallel.fsdp import grad_sync_interval, reshard_after_last_backward_only
from trainer.parallel.init import seeded_init_fn
from trainer.preemption import PreemptionWatcher, stop_label
from trainer.run_lock import lock_run_folder
from trainer.state_memory import check_state_fits
from trainer.profiling import StepProfiler


class NonFiniteError(RuntimeError):
    """The loss or gradient norm became NaN/inf; the optimizer step was not taken."""


def _atomic_write(path: Path, text: str) -> None:
    atomic_write(path, lambda f: f.write(text.encode()))


_LAUNCH_CONFIG = re.compile(r"config_(\d+)\.toml")


def keep_launch_config(run_dir: Path, text: str) -> Path | None:
    """Record this launch's resolved config in the run folder without losing an earlier one.

    config.toml is the first launch's and is never rewritten (scripts/convert_checkpoint.py and the
    user read it as the config the run started with). A launch whose config differs from the latest
    kept one writes config_0002.toml, config_0003.toml, ... (names that sort after config.toml, in
    launch order). Returns the file written, or None when the latest kept one is identical.
    """
    first = run_dir / "config.toml"
    if not first.exists():
        _atomic_write(first, text)
        return first
    number, latest = _latest_launch_config(run_dir)
    if latest.read_text() == text:
        return None
    path = run_dir / f"config_{number + 1:04d}.toml"
    _atomic_write(path, text)
    logger.info(f"config: this launch's config differs from the earlier launch's {latest.name} "
                f"(kept as it was); this launch's resolved config is {path}")
    return path


def _latest_launch_config(run_dir: Path) -> tuple[int, Path]:
    """(number, file) of the newest kept launch config; (1, config.toml) before any config_NNNN."""
    numbered = sorted((int(m.group(1)), p) for p in run_dir.iterdir()
                      if (m := _LAUNCH_CONFIG.fullmatch(p.name)))
    return numbered[-1] if numbered else (1, run_dir / "config.toml")


def record_launch_config(run_dir: Path, text: str) -> str:
    """keep_launch_config, then the name of the file holding this launch's config (the one it wrote,
    or the identical latest one): this launch's checkpoints record it (train.launch_config), so
    scripts/convert_checkpoint.py reads the config a step was saved under without guessing."""
    keep_launch_config(run_dir, text)
    return _latest_launch_config(run_dir)[1].name


def token_loss_sum(logits: torch.Tensor, labels: torch.Tensor, global_tokens: int) -> torch.Tensor:
    """Cross-entropy summed over this rank's tokens (fp32), divided by the step's global token count."""
    return F.cross_entropy(logits.flatten(0, 1).float(), labels.flatten(), reduction="sum") / global_tokens


class Trainer:
    def __init__(self, cfg: JobConfig, dims: ParallelDims | None = None,
                 preemption: PreemptionWatcher | None = None):
        """`dims`: the result of validate_config(cfg, world size) when the caller already ran it.
        `preemption`: a watcher the caller installed earlier (trainer/train.py, before the config is
        read); a SIGTERM / SIGUSR1 it recorded during start-up stops the run before its first step."""
        init_logging()
        self.preemption = preemption if preemption is not None else PreemptionWatcher()
        self.cfg = cfg
        # Validation needs no process group: a bad config fails before any rank waits on another.
        self.dims = dims if dims is not None else validate_config(cfg, env_world_size())
        self.run_dir = Path(cfg.run.dump_folder).expanduser() / cfg.run.name
        if cfg.run.deterministic:
            # Must be set before cuBLAS starts; needed for bitwise-reproducible matmuls.
            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        self.device = init_distributed(cfg.comm, str(self.run_dir), cfg.parallelism.fsdp_all_gather)
        self.rank = dist.get_rank()
        check_device_backends(cfg, self.device.type)
        self.mesh = self.dims.build_mesh(self.device.type)
        logger.info(f"parallel dims: {self.dims}")
        # Rank 0 makes the run folder and locks it, one launch per folder: a second launch (a
        # double-submitted job) or a folder that cannot be made stops here, on every rank.
        self.run_lock = lock_run_folder(self.run_dir, self.rank)
        torch.manual_seed(cfg.run.seed)
        if cfg.run.deterministic:
            torch.use_deterministic_algorithms(True)
            torch.utils.deterministic.fill_uninitialized_memory = cfg.run.deterministic_fill
            if not cfg.run.deterministic_fill:
                logger.info("deterministic mode without the NaN fill of new tensors "
                            "(run.deterministic_fill = false)")
            torch.backends.cudnn.deterministic = True
            torch.backends.cudnn.benchmark = False

        # Data: every rank of one DP group (its cp x tp ranks) reads the same samples.
        t = cfg.training
        dp_rank = self.dims.get_mesh("dp").get_local_rank() if self.dims.dp > 1 else 0
        self.tokenizer = build_tokenizer(cfg.data.tokenizer)
        self.dataset = build_dataset(cfg.data, self.tokenizer, rank=self.rank)
        self.stream = SampleStream(self.dataset, t.seq_len, cfg.run.seed, dp_rank, self.dims.dp,
                                   t.local_batch_size)
        gbs = t.global_batch_size if t.global_batch_size > 0 else t.local_batch_size * self.dims.dp
        self.grad_accum = gbs // (t.local_batch_size * self.dims.dp)
        self.global_tokens = gbs * t.seq_len
        # What a checkpoint records, so a resume can refuse to continue another stream.
        self.data_identity = stream_identity(self.dataset, t.seq_len, gbs, cfg.run.seed,
                                             cfg.data.dataset, cfg.data.tokenizer)
        if self.rank == 0:
            self._log_data_coverage(t.steps, gbs)

        # Model: meta -> (fp8) -> parallelize -> materialize -> init, so no rank ever holds it whole.
        family = FAMILIES[cfg.model.name]
        self.model_args = resolve_model_args(cfg)  # vocab_size covers the tokenizer: validate_config
        # What a checkpoint records, so a resume can refuse to continue as another model.
        self.model_identity = model_identity(cfg.model.name, cfg.model.flavor, self.model_args)
        with torch.device("meta"):
            model = family.model_cls(self.model_args)
        if cfg.float8.enable:
            from trainer.float8 import convert_to_float8_training

            convert_to_float8_training(model, cfg.float8)
        model = parallelize(model, self.dims, cfg)
        # Each rank's shards are known now and nothing is allocated yet: a state that cannot fit
        # stops here with its sizes, not as the OOM killer's -9 or a CUDA OOM after the init.
        check_state_fits(model, self.device)
        model.to_empty(device=self.device)
        with torch.no_grad():
            model.init_weights(init_fn=seeded_init_fn(cfg.run.seed, self.device),
                               buffer_device=self.device)
        model.train()
        self.model = model
        self.n_params = sum(p.numel() for p in model.parameters())  # DTensor: the global size
        self.grad_sync_every = grad_sync_interval(model, self.dims, cfg, self.grad_accum, self.n_params)
        self.reshard_last_micro_batch = reshard_after_last_backward_only(
            model, self.dims, cfg, self.grad_accum, self.n_params)
        self.loss_fn = token_loss_sum
        if cfg.compile.enable and not self.dims.tp_enabled:
            # Fused, the cross-entropy never materialises fp32 copies of the (tokens x vocab) logits
            # (4.2 GB each for Llama-3 8B at seq 8192). Under TP the logits are DTensors: eager.
            from trainer.parallel.compile import compile_loss

            self.loss_fn = compile_loss(token_loss_sum)
        self.flops_per_token = self.model_args.flops_per_token(t.seq_len)

        self.optimizer = build_optimizer(model, cfg.optimizer, self.device.type)
        self.lr_scheduler = build_lr_scheduler(self.optimizer, t.steps, cfg.lr_scheduler)
        self.step = 0
        self.tokens_seen = 0
        self.metrics = MetricsLogger(cfg, self.run_dir, rank=self.rank, config=config_to_dict(cfg))
        interval = cfg.metrics.gpu_sample_interval  # rank 0's GPU: the only rank that logs
        self.gpu_sampler = (GpuSampler.for_device(self.device, interval)
                            if interval > 0 and self.rank == 0 else None)
        self.meter = StepMeter(self.flops_per_token, resolve_peak_flops(cfg.metrics, self.device, self.rank),
                               cp=self.dims.cp, tp=self.dims.tp, device=self.device, gpu=self.gpu_sampler)
        dist.barrier()  # rank 0 may have waited on wandb.init; start the steps together
        self.checkpointer = None
        if cfg.checkpoint.enable or cfg.checkpoint.initial_load_path:
            from trainer.checkpoint import CheckpointManager

            self.checkpointer = CheckpointManager(self)
            self.checkpointer.load()
            if self.rank == 0 and self.step == 0 and not cfg.checkpoint.initial_load_path:
                self._warn_other_checkpoint_folders()
        elif self.rank == 0:
            self._warn_unused_checkpoints()
        # Steps after this one that earlier launches logged are logged again: their rows move aside.
        self.metrics.resumed_at(self.step)
        # Recorded once the launch is accepted: a resume that the checkpoint refuses (another data
        # stream, a bad step) leaves no config behind for a run that never trained. Rank 0 writes
        # it; every rank learns its file name, which this launch's checkpoints record.
        self.launch_config = on_rank0(
            lambda: record_launch_config(self.run_dir, config_to_toml(cfg)), self.rank)
        # Without checkpoints a preemption saves nothing, but every rank still stops after the same
        # step and says why, instead of being killed mid-step (scripts/train.sh, README).
        self.unsaved_preemption = None if cfg.checkpoint.enable else self.preemption
        logger.info(f"model {cfg.model.name}/{cfg.model.flavor}: {self.n_params:,} params, "
                    f"{self.flops_per_token:.3e} FLOPs/token, grad accumulation {self.grad_accum}")

    def _log_data_coverage(self, steps: int, gbs: int) -> None:
        """How much of the dataset the run reads: a run past one epoch repeats samples (a small
        dataset is memorised: the loss falls while nothing new is learned), so that is a warning."""
        n = self.stream.n_windows
        epochs = steps * gbs / n
        line = (f"data: {self.dataset.name}: {len(self.dataset):,} tokens, {n:,} samples of "
                f"{self.stream.seq_len} tokens; {steps:,} steps x {gbs} samples read "
                f"{steps * gbs:,} of them ({epochs:.3g} epochs)")
        if epochs > 1:
            logger.warning(f"{line}: every sample is seen about {epochs:.3g} times (a larger "
                           f"dataset, fewer training.steps or a smaller batch reads each once)")
        else:
            logger.info(line)

    def _warn_unused_checkpoints(self) -> None:
        """A relaunch that forgot checkpoint.enable would silently start over beside the saved steps."""
        self._warn_not_loaded([self.run_dir / self.cfg.checkpoint.folder], "checkpoint.enable = false",
                              lambda folder: "checkpoint.enable = true")

    def _warn_other_checkpoint_folders(self) -> None:
        """A relaunch with another checkpoint.folder starts over although the run folder holds
        complete checkpoints in the old one (one level below the run folder, where the default
        and most choices put them): say so, as for checkpoint.enable = false."""
        mine = (self.run_dir / self.cfg.checkpoint.folder).resolve()
        self._warn_not_loaded(
            [p for p in self.run_dir.iterdir() if p.is_dir() and p.resolve() != mine],
            f"checkpoint.folder = {self.cfg.checkpoint.folder!r} holds no checkpoint, so this run starts "
            "at step 0", lambda folder: f"checkpoint.folder = {folder.name!r}")

    def _warn_not_loaded(self, folders: list[Path], why: str, setting) -> None:
        """One warning per folder of `folders` that holds complete checkpoints this launch ignores
        (`why`), naming `setting(folder)` as what resumes from them."""
        from trainer.checkpoint_folders import complete_step_folders

        for folder in sorted(folders):
            steps = [s for s, _ in complete_step_folders(folder, warn=False)] if folder.is_dir() else []
            if steps:
                logger.warning(
                    f"{why}, but {folder} holds complete checkpoints of this run (steps "
                    f"{', '.join(map(str, steps))}): they are not loaded, this run starts at step 0, and "
                    f"the earlier rows of metrics.jsonl move to metrics.superseded.jsonl. Set "
                    f"{setting(folder)} to resume from step {steps[-1]}, or use another run.name for a "
                    "fresh run")

    # ---- one optimizer step -------------------------------------------------------------------
    def _loss_context(self):
        if self.dims.tp_enabled and self.cfg.parallelism.enable_loss_parallel:
            from torch.distributed.tensor.parallel import loss_parallel

            return loss_parallel()
        return contextlib.nullcontext()

    def _micro_batch(self) -> dict[str, torch.Tensor | None]:
        batch = self.stream.next_batch()
        out = {
            "tokens": batch["tokens"].to(self.device, non_blocking=True),
            "labels": batch["labels"].to(self.device, non_blocking=True),
            "positions": None,
            "doc_ids": (batch["doc_ids"].to(self.device, non_blocking=True)
                        if self.cfg.data.document_mask else None),
        }
        if self.dims.cp_enabled:
            from trainer.parallel.context import shard_batch_for_cp

            out = shard_batch_for_cp(out, self.dims)
        return out

    def train_step(self) -> float:
        """One optimizer step over grad_accum micro-batches; returns the global average loss."""
        self.step += 1
        self.optimizer.zero_grad(set_to_none=True)
        t_data = 0.0
        loss_sum = torch.zeros((), device=self.device)
        for micro in range(self.grad_accum):
            last = micro == self.grad_accum - 1
            if self.grad_sync_every > 1:
                self.model.set_requires_gradient_sync(last or (micro + 1) % self.grad_sync_every == 0)
            if self.reshard_last_micro_batch:
                self.model.set_reshard_after_backward(last)
            t0 = time.perf_counter()
            with record_function("data"):
                batch = self._micro_batch()
            t_data += time.perf_counter() - t0
            with self._loss_context(), record_function("forward_backward"):
                logits = self.model(batch["tokens"], positions=batch["positions"],
                                    doc_ids=batch["doc_ids"])
                # Sum over this rank's tokens / tokens of the whole step: the FSDP reduction (a sum,
                # divide factor 1) then yields the exact mean gradient for any layout.
                loss = self.loss_fn(logits, batch["labels"], self.global_tokens)
                loss.backward()
            loss_sum += (loss.to_local() if isinstance(loss, DTensor) else loss).detach()
            del logits, loss
        params = list(self.model.parameters())
        norm = grad_norm(params)
        if self.dims.dp_cp > 1:
            dist.all_reduce(loss_sum, group=self.dims.get_mesh("dp_cp").get_group())
        # One host sync per step: it checks for NaN/inf before any weight moves, and lets the clip
        # skip its pass over all gradients in the (usual) steps that need no clipping.
        loss_val, norm_val = torch.stack([loss_sum, norm.to(loss_sum)]).tolist()
        if not (math.isfinite(loss_val) and math.isfinite(norm_val)):
            raise NonFiniteError(
                f"step {self.step}: loss {loss_val} / grad norm {norm_val} is not finite; the step "
                "was not applied. Relaunch to resume from the last checkpoint with a lower "
                "optimizer.lr (a resume applies the relaunch's optimizer settings), or check the "
                "data (to read another sample order, a resume with another run.seed needs "
                "checkpoint.allow_data_change = true).")
        max_norm = self.cfg.training.max_norm
        clip = max_norm / (norm_val + 1e-6) if max_norm > 0 and norm_val > max_norm else None
        clip_grads_(self.optimizer, params, clip)
        self.last_lr = self.optimizer.param_groups[0]["lr"]  # the lr this step used
        with record_function("optimizer"):
            self.optimizer.step()
            self.lr_scheduler.step()
        # Model-side work after the weights moved (MoE: all-reduce expert loads, update the
        # auxiliary-loss-free router bias identically on every rank).
        hook = getattr(self.model, "post_optimizer_step", None)
        if callable(hook):
            hook()
        self.tokens_seen += self.global_tokens
        self.last_grad_norm = norm_val
        self.last_data_time = t_data
        self.completed_step = self.step  # self.step counts from the step's start
        return loss_val

    # ---- the loop ------------------------------------------------------------------------------
    def train(self) -> None:
        cfg = self.cfg
        t = cfg.training
        if t.gc_freq > 0:
            gc.disable()  # collect at fixed steps so ranks never pause at different times
        local_tokens = t.local_batch_size * t.seq_len * self.grad_accum  # per DP rank, pre-CP split
        self.meter.reset()
        first = True
        self.completed_step = self.step  # the loaded checkpoint's, or 0
        # From here a first Ctrl-C stops after the current step (saved) instead of at once.
        self.preemption.saves = cfg.checkpoint.enable
        self.preemption.training = True
        if self._preempted_during_startup():
            return
        profiler = StepProfiler(cfg, self.run_dir, self.rank, dist.get_world_size(), self.device, self.step)
        while self.step < t.steps:
            if t.gc_freq > 0 and self.step % t.gc_freq == 0:
                gc.collect(1)
            loss = self.train_step()
            with self.meter.paused(profiler.writes_at(self.step)):  # an export is no step time
                profiler.step(self.step)
            self.meter.add_step(local_tokens, self.last_data_time)
            first_of_launch, first = first, False
            if first_of_launch:
                set_train_timeout(cfg.comm, self.mesh)
            last = self.step == t.steps
            # The launch's first step (step 1, or the first after a resume) gets a row of its own:
            # its warm-up (compile, allocator, communicators) would pull down the next row's tokens/s.
            if first_of_launch or self.step % cfg.metrics.log_freq == 0 or last:
                self.metrics.log(self.step, {
                    **self.meter.collect(),
                    "loss_metrics/global_avg_loss": loss,
                    "grad_norm": self.last_grad_norm,
                    "lr": self.last_lr,
                    "n_tokens_seen": self.tokens_seen,
                    **self.extra_metrics(),
                })
            if self.checkpointer is not None:
                with self.meter.paused(self.checkpointer.saves_at(self.step, last)):  # nor a save
                    stop = self.checkpointer.after_step(self.step, last=last)
                if stop:
                    label = stop_label(self.preemption.agreed_signal)
                    logger.warning(f"{label}: checkpoint of step {self.step} saved, exiting"
                                   + ("; relaunch the same command to continue" if label == "Ctrl-C" else ""))
                    break
            if self.unsaved_preemption is not None and self.unsaved_preemption.agreed():
                self.unsaved_preemption.exit_unsaved(self.step)
        profiler.close()

    def _preempted_during_startup(self) -> bool:
        """Collective: True when any rank got SIGTERM / SIGUSR1 before the first step. Nothing new
        exists to save (the step is the loaded checkpoint's, or 0); without checkpoints the run
        exits unsaved, as after any step."""
        if not self.preemption.agreed():
            return False
        if self.unsaved_preemption is not None:
            self.unsaved_preemption.exit_unsaved(self.step, during_startup=True)
        if self.rank == 0:
            done = (f"a relaunch continues from the checkpoint of step {self.step}" if self.step
                    else "no step was trained")
            logger.warning(f"{stop_label(self.preemption.agreed_signal)} during start-up: stopping "
                           f"before step {self.step + 1} "
                           f"with nothing new to save ({done})")
        return True

    def extra_metrics(self) -> dict[str, float]:
        """Model-specific values for the log (MoE router statistics); none for dense models."""
        fn = getattr(self.model, "metrics", None)
        return fn() if callable(fn) else {}

    def close(self) -> None:
        if self.checkpointer is not None:
            self.checkpointer.close()
        self.preemption.close()  # also the checkpointer's and the unsaved watcher (one object)
        self.metrics.close()
        if self.gpu_sampler is not None:
            self.gpu_sampler.close()
        gc.enable()
        if self.run_lock is not None:  # last: the folder is this launch's until everything closed
            self.run_lock.release()

