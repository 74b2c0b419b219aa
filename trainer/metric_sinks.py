"""Where logged metrics go on rank 0: metrics.jsonl, wandb and TensorBoard.

Each sink takes `write(step, values)` with `values` a flat dict of str -> float | int | None and has
`close()`. None of them does a collective: only rank 0 builds them (see trainer/metrics.py), and the
trainer owns the barrier that follows, so a slow or broken sink can never deadlock other ranks.
"""

from __future__ import annotations

import importlib.util
import json
import math
import netrc
import os
import secrets
import string
import threading
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

from trainer.log import logger
from trainer.metrics_superseded import move_rows_after

RUN_ID_FILE = "wandb_run_id"
DEFAULT_WANDB_INIT_TIMEOUT_S = 90.0


class JsonlSink:
    """Appends one JSON object per log step to run_dir/metrics.jsonl, flushed at once.

    Appending (not truncating) keeps the earlier lines of a resumed run; resumed_at moves the rows
    that the resume replays to metrics.superseded.jsonl. Non-finite floats (a NaN loss) are written
    as null so the file stays strict JSON that jq and every parser accept; the console line still
    shows the nan.
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._open()

    def _open(self) -> None:
        self._file = open(self.path, "a", encoding="ascii")
        if self._file.tell() > 0 and not _ends_with_newline(self.path):
            # A process killed mid-line left a torn last line: without this newline the next row
            # would be glued to it and both would be unreadable.
            self._file.write("\n")
            self._file.flush()

    def write(self, step: int, values: dict[str, Any]) -> None:
        row = {k: _finite_or_none(v) for k, v in values.items()}
        row["step"] = step
        # flush() hands the line to the OS: a crashed or killed process loses nothing it logged.
        self._file.write(json.dumps(row, allow_nan=False) + "\n")
        self._file.flush()

    def resumed_at(self, step: int) -> None:
        """Move the rows with step > `step` (an earlier attempt's, which this run logs again) to
        metrics.superseded.jsonl; see trainer/metrics_superseded.py. A disk error leaves
        metrics.jsonl as it was and becomes a warning: the run goes on, appending as before."""
        # The move replaces the file: an append handle opened before would write into the old one.
        self._file.close()
        try:
            result = move_rows_after(self.path, step)
        except OSError as e:
            logger.warning(
                f"metrics: could not move the rows after step {step} out of {self.path} ({e}); the "
                f"file is unchanged, so the steps this run logs again appear twice in it")
            return
        finally:
            self._open()
        if result.unusable_lines:
            lines = result.unusable_lines
            shown = ", ".join(map(str, lines[:5])) + (", ..." if len(lines) > 5 else "")
            logger.warning(
                f"metrics: {len(lines)} line(s) of {self.path} (line {shown}) are not JSON rows with an "
                f"integer step; they are kept where they are")
        if result.moved:
            low, high = result.steps
            logger.info(
                f"metrics: resumed at step {step}: moved {result.moved} row(s) of an earlier attempt "
                f"(steps {low}..{high}) from {self.path.name} to {result.target}")

    def close(self) -> None:
        if not self._file.closed:
            self._file.close()


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


def _finite_or_none(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v


# ---------------------------------------------------------------- TensorBoard


def require_tensorboard() -> None:
    """Raise a clear ImportError when TensorBoard is not installed (checked on every rank)."""
    if importlib.util.find_spec("tensorboard") is None:
        raise ImportError(
            "metrics.enable_tensorboard = true needs the tensorboard package, which is not installed: "
            "run `pip install tensorboard` (in a checkout: `pip install -e '.[tensorboard]'`), or set "
            "metrics.enable_tensorboard = false"
        )


class TensorBoardSink:
    """Scalars into run_dir/tb/ through torch.utils.tensorboard.SummaryWriter (imported lazily).

    The writer (and its event file) is made at the first write, so that a resume can make it with
    purge_step first (resumed_at) instead of leaving an empty event file behind.
    """

    def __init__(self, log_dir: Path) -> None:
        require_tensorboard()
        from torch.utils.tensorboard import SummaryWriter

        self._make = SummaryWriter
        self._log_dir = log_dir
        self._writer: Any = None
        self._purge_step: int | None = None

    def write(self, step: int, values: dict[str, Any]) -> None:
        if self._writer is None:
            self._writer = self._make(log_dir=str(self._log_dir), purge_step=self._purge_step)
            self._purge_step = None
        for key, v in values.items():
            if isinstance(v, (int, float)) and not isinstance(v, bool):
                self._writer.add_scalar(key, v, step)
        # SummaryWriter flushes every 120 s by default; at log frequency a flush is cheap.
        self._writer.flush()

    def resumed_at(self, step: int) -> None:
        """The next event file starts with purge_step = step + 1: TensorBoard then hides the events
        of steps > `step` from earlier event files in tb/ (they stay on disk, never deleted)."""
        self.close()
        self._writer = None
        self._purge_step = step + 1

    def close(self) -> None:
        if self._writer is not None:
            self._writer.close()


# ---------------------------------------------------------------- wandb


def wandb_api_key_configured() -> bool:
    """True when wandb could authenticate without asking: WANDB_API_KEY or a netrc entry.

    The netrc host is the one of WANDB_BASE_URL (default api.wandb.ai). wandb.login is never called:
    it may prompt, and a prompt on rank 0 of a batch job hangs every rank.
    """
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = Path(os.environ.get("NETRC", Path.home() / ".netrc")).expanduser()
    if not path.is_file():
        return False
    try:
        entry = netrc.netrc(str(path)).authenticators(host)
    except (netrc.NetrcParseError, OSError) as e:
        logger.warning(f"wandb: could not read {path} ({e}); treating the wandb API key as not configured")
        return False
    return entry is not None and bool(entry[2])


def load_or_create_run_id(run_dir: Path) -> str:
    """The wandb run id of this run folder: read from run_dir/wandb_run_id, else made and stored.

    Stored atomically (temp file, then rename) so a crash never leaves a half-written id, and a
    resumed run continues the same wandb run.
    """
    path = run_dir / RUN_ID_FILE
    if path.is_file():
        run_id = path.read_text(encoding="ascii").strip()
        if not run_id or not all(c in string.ascii_lowercase + string.digits for c in run_id):
            raise ValueError(
                f"{path}: expected a wandb run id of lowercase letters and digits, got {run_id!r}; "
                "delete the file to start a new wandb run"
            )
        return run_id
    alphabet = string.ascii_lowercase + string.digits
    run_id = "".join(secrets.choice(alphabet) for _ in range(8))
    run_dir.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{RUN_ID_FILE}.tmp{os.getpid()}")
    tmp.write_text(run_id + "\n", encoding="ascii")
    os.replace(tmp, path)
    return run_id


def wandb_init_timeout_from_env() -> float:
    raw = os.environ.get("WANDB_INIT_TIMEOUT")
    if raw is None:
        return DEFAULT_WANDB_INIT_TIMEOUT_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0:
        raise ValueError(f"environment variable WANDB_INIT_TIMEOUT={raw!r}: expected a positive number of seconds")
    return value


class WandbSink:
    """A wandb run on rank 0, or nothing: every failure becomes one warning and a no-op sink.

    Check `active` after construction. wandb.init runs in a helper thread bounded by `init_timeout`
    (plus a short grace so wandb's own timeout error, which names the cause, usually wins): a hang
    there would otherwise stall rank 0 and, through the next collective, every other rank.
    """

    def __init__(
        self,
        *,
        project: str,
        name: str,
        run_dir: Path,
        config: dict[str, Any],
        init_timeout: float,
    ) -> None:
        self.active = False
        self._run: Any = None
        self._last_step: int | None = None
        self._warned_skip = False
        if importlib.util.find_spec("wandb") is None:
            logger.warning("metrics.enable_wandb = true but wandb is not installed (pip install wandb); not logging to wandb")
            return
        try:
            import wandb
        except Exception as e:  # a broken install must not stop training
            logger.warning(f"metrics.enable_wandb = true but `import wandb` failed ({e!r}); not logging to wandb")
            return

        kwargs: dict[str, Any] = dict(
            project=project,
            name=name,
            dir=str(run_dir),
            config=config,
            id=load_or_create_run_id(run_dir),
            resume="allow",
        )
        mode_note = ""
        if "WANDB_MODE" not in os.environ and not wandb_api_key_configured():
            kwargs["mode"] = "offline"
            mode_note = " (offline: no WANDB_API_KEY and no netrc entry; `wandb sync` uploads it later)"
        run, error = _init_with_deadline(wandb, kwargs, init_timeout)
        if run is None:
            logger.warning(f"wandb.init failed: {error}; training continues without wandb")
            return
        self._run = run
        self.active = True
        # On an online resume wandb continues at its last step + 1; steps below it would be dropped.
        start = int(getattr(run, "starting_step", 0) or 0)
        self._last_step = start - 1 if start > 0 else None
        logger.info(f"wandb: run {kwargs['id']} in {run_dir / 'wandb'}{mode_note}")

    def write(self, step: int, values: dict[str, Any]) -> None:
        if not self.active:
            return
        if self._last_step is not None and step <= self._last_step:
            # wandb drops non-increasing steps itself; say so once instead of failing silently.
            if not self._warned_skip:
                logger.warning(
                    f"wandb: step {step} <= last logged step {self._last_step} (a resume replays steps); "
                    "skipping such steps in wandb (metrics.jsonl keeps them)"
                )
                self._warned_skip = True
            return
        self._run.log({k: v for k, v in values.items() if v is not None}, step=step)
        self._last_step = step

    def resumed_at(self, step: int) -> None:
        """wandb cannot take back logged steps, nor log a step below its last one. Online, the resumed
        run starts after the earlier attempt's last step, so this run's steps up to it are skipped
        here (said once, now). Offline, wandb does not know that step (starting_step is 0): the
        replayed steps go into the new offline file, and what `wandb sync` makes of steps below the
        run's last synced one is wandb's to decide (not tested here: it needs the server)."""
        if not self.active or self._last_step is None or self._last_step <= step:
            return
        logger.warning(
            f"wandb: run {self._run.id} already has steps up to {self._last_step} from an earlier "
            f"attempt, and wandb cannot rewind a run: steps {step + 1}..{self._last_step} of this "
            f"attempt are not sent to wandb, the earlier attempt's stay there (metrics.jsonl has "
            f"this attempt's, metrics.superseded.jsonl the earlier ones)")
        self._warned_skip = True

    def close(self) -> None:
        if self.active:
            self.active = False
            self._run.finish()


def _init_with_deadline(wandb: Any, kwargs: dict[str, Any], timeout: float) -> tuple[Any, str]:
    """Call wandb.init in a daemon thread; return (run, "") or (None, reason) after the deadline."""
    result: dict[str, Any] = {}
    lock = threading.Lock()

    def target() -> None:
        try:
            settings = wandb.Settings(init_timeout=timeout)
            run = wandb.init(settings=settings, **kwargs)
        except BaseException as e:  # noqa: BLE001 -- reported to the caller as the reason
            with lock:
                result["error"] = f"{type(e).__name__}: {e}"
            return
        with lock:
            if result.get("abandoned"):
                # The caller gave up on this run: close it so it does not linger half-used.
                late = True
            else:
                result["run"] = run
                late = False
        if late:
            try:
                run.finish()
            except Exception:
                pass

    thread = threading.Thread(target=target, name="wandb-init", daemon=True)
    thread.start()
    thread.join(timeout + max(1.0, 0.1 * timeout))
    with lock:
        if "run" in result:
            return result["run"], ""
        if "error" in result:
            return None, result["error"]
        result["abandoned"] = True
    return None, f"no answer within {timeout:g} s (WANDB_INIT_TIMEOUT)"
