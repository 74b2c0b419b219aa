"""What a failed checkpoint write tells the user: one message, for one `[rankN] error:` line per rank.

DCP reports a failed write as a CheckpointException holding every rank's exception and traceback;
printed as it comes, that is 300+ lines per rank, and the cause (a full disk) is in the middle. The
cause is not always an OSError either: torch.save's zip writer reports a short write as
"RuntimeError: [enforce fail at inline_container.cc:672] . unexpected pos 704 vs 598", with the
ENOSPC lost. So the free space of the folder's device is checked too, as evidence of its own.
"""

from __future__ import annotations

import errno
import shutil
from pathlib import Path

from trainer.checkpoint_folders import STEP_RE, complete_step_folders, incomplete_reason

# A rank's failure is shown up to this many characters (the first line of its message).
_SHOWN_CHARS = 240


class CheckpointWriteError(RuntimeError):
    """A checkpoint could not be written. The message names the folder, the cause, the free space
    and the checkpoint a relaunch continues from; trainer/train.py prints it as one line per rank."""


class CheckpointReadError(RuntimeError):
    """A complete-looking checkpoint could not be read, or its files differ from the checksums
    recorded when it was saved. The message names the folder, each rank's cause (or each damaged
    file) and the checkpoints to continue from instead; trainer/train.py prints it as one line per
    rank. DCP raises CheckpointException, a BaseException, which the start-up's handler (it takes
    Exception types) let through as a 150-line traceback per rank that named no folder."""


def causes(exc: BaseException) -> list[BaseException]:
    """exc, its __cause__/__context__ chain, and the per-rank failures a CheckpointException holds."""
    seen: list[BaseException] = []
    todo = [exc]
    while todo:
        e = todo.pop()
        if e is None or any(e is x for x in seen):
            continue
        seen.append(e)
        todo += [e.__cause__, e.__context__]
        for f in _rank_failures(e).values():
            todo.append(f)
    return seen


def _rank_failures(exc: BaseException) -> dict[int, BaseException]:
    """A CheckpointException's {rank: exception} (its failures are {rank: (exception, traceback)})."""
    failures = getattr(exc, "failures", None)
    out: dict[int, BaseException] = {}
    if isinstance(failures, dict):
        for rank, f in failures.items():
            f = f[0] if isinstance(f, tuple) and f else f
            if isinstance(f, BaseException):
                out[rank] = f
    return out


def _one_line(exc: BaseException) -> str:
    """'Type: first line of the message', the deepest cause of `exc` (it says what went wrong)."""
    while True:
        inner = exc.__cause__ or exc.__context__
        if inner is None or _rank_failures(exc):
            break
        exc = inner
    text = str(exc).strip().splitlines()
    first = text[0] if text else ""
    if len(first) > _SHOWN_CHARS:
        first = first[:_SHOWN_CHARS] + "..."
    return f"{type(exc).__name__}: {first}" if first else type(exc).__name__


def summary(exc: BaseException) -> str:
    """The cause in one line: each rank's failure, identical ones merged ('ranks 0, 1: OSError: ...')."""
    by_rank: dict[int, BaseException] = {}
    for e in causes(exc):
        for rank, f in _rank_failures(e).items():
            by_rank.setdefault(rank, f)
    if not by_rank:
        return _one_line(exc)
    shown: dict[str, list[int]] = {}
    for rank in sorted(by_rank):
        shown.setdefault(_one_line(by_rank[rank]), []).append(rank)
    parts = [f"rank{'s' if len(r) > 1 else ''} {', '.join(map(str, r))}: {line}"
             for line, r in shown.items()]
    return "; ".join(parts)


def size(n: float) -> str:
    """Bytes for a message: GB from 1 GB up, then MB, then kB (a full device shows as '0 kB')."""
    if n >= 1e9:
        return f"{n / 1e9:.1f} GB"
    return f"{n / 1e6:.1f} MB" if n >= 1e6 else f"{n / 1e3:.0f} kB"


def write_failure(root: Path, path: Path, exc: BaseException, rank_bytes: int | None) -> str:
    """The message for a failed write of step folder `path` under `root`. rank_bytes: what this rank
    was writing (None: unknown); a device with less free space than that is taken as full."""
    free: int | None = None
    try:
        free = shutil.disk_usage(root).free
    except OSError:
        pass
    if any(isinstance(e, OSError) and e.errno == errno.ENOSPC for e in causes(exc)):
        full = "no space left on the device"
    elif free is not None and rank_bytes is not None and free < max(rank_bytes, 1):
        # The failed write's own partial files fill what was left: the device is (nearly) full
        # although the exception does not say so.
        full = (f"no space left on the device, most likely: less free than the {size(rank_bytes)} "
                "this rank writes")
    else:
        full = ""
    complete = [s for s, _ in complete_step_folders(root, warn=False)] if Path(root).is_dir() else []
    last = f"step-{complete[-1]}" if complete else "none yet"
    space = f"{size(free)} free on {root}" if free is not None else f"free space on {root} unknown"
    advice = ("Free space there (or lower checkpoint.keep_latest_k) and relaunch"
              if full else "Relaunch once the cause is fixed")
    then = f": it continues from {last}" if complete else ": it starts at step 0"
    # A failure after DCP put .metadata in place (a peer dying during its final broadcast of the
    # result) leaves a folder that counts as complete, and a relaunch resumes it: say what is on
    # disk, not what a failed write usually leaves.
    if incomplete_reason(path) is None:
        folder = ("Its .metadata and every shard it names were written before the failure, so the "
                  "folder counts as complete")
    else:
        folder = "The folder stays incomplete and a relaunch skips it"
    return (f"checkpoint {path} could not be written ({full + '; ' if full else ''}{space}): "
            f"{summary(exc)}. {folder}; the newest complete checkpoint is {last}. {advice}{then}")


def read_failure(root: Path, path: Path, exc: BaseException) -> str:
    """The message for a failed read of step folder `path`; `root` is this run's checkpoint folder.
    The folder passed the completeness check (its .metadata reads and every shard file is as long
    as it records), so what failed is the content: a corrupt copy, bit rot, an I/O error."""
    path = Path(path)
    head = (f"checkpoint {path} could not be read: {summary(exc)}. Its files are damaged or "
            "unreadable (every shard file is as long as its .metadata records, so it was not "
            "skipped as incomplete); the run stops here and nothing on disk was changed")
    return _instead(root, path, head)


def damage_failure(root: Path, path: Path, damaged: list[tuple[str, str]], checked: int) -> str:
    """The message for step folder `path` whose files differ from the checksums recorded when it was
    saved (trainer/checkpoint_checksums.py); damaged: (file name, what differs), checked: how many
    files were compared. `root` is this run's checkpoint folder."""
    shown = 8  # a copy that went wrong wholesale would otherwise fill the screen
    files = "; ".join(f"{name}: {what}" for name, what in damaged[:shown])
    if len(damaged) > shown:
        files += f"; and {len(damaged) - shown} more"
    head = (f"checkpoint {path} is damaged: {len(damaged)} of its {checked} files differ from the "
            f"checksums recorded when it was saved ({files}). The run stops before reading it and "
            "nothing on disk was changed")
    return _instead(Path(root), Path(path), head)


def _instead(root: Path, path: Path, head: str) -> str:
    """`head` (what is wrong with step folder `path`), then which checkpoint to load instead."""
    if path.parent != Path(root):  # checkpoint.initial_load_path: another run's folder
        return f"{head}. Pass another checkpoint as checkpoint.initial_load_path"
    steps = [s for s, _ in complete_step_folders(root, warn=False)] if Path(root).is_dir() else []
    match = STEP_RE.match(path.name)
    older = [s for s in steps if match and s < int(match.group(1))]
    if not older:
        return (f"{head}. {root} holds no older complete checkpoint; restore the folder from a "
                "copy, or move it out of there to start this run at step 0")
    return (f"{head}. To resume from the newest older one, set checkpoint.load_step = {older[-1]} "
            f"(complete ones in {root}: {steps}), or move {path.name} out of {root}; a relaunch "
            f"then continues from step-{older[-1]}")
