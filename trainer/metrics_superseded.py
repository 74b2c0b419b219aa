"""Set aside the rows of metrics.jsonl that a resume replays, so the file holds each step once.

A run that saved a checkpoint at step N and went on logging steps N+1.. before it died (or that a
user rewinds with checkpoint.load_step = N) logs those steps again after the resume. Before the new
rows come, move_rows_after(path, N) moves the earlier attempt's rows with step > N out of
metrics.jsonl into metrics.superseded.jsonl beside it (appended to, each row tagged with when and
for which resume it was moved). Nothing is deleted: the superseded file keeps the earlier attempts,
the way checkpoint.py renames a rewind's step folders to step-M.superseded.

Order, so that no crash loses a row (DESIGN.md section 2.6):
  1. the moved rows are appended to the superseded file and fsynced;
  2. the kept lines, written to a temp file beside metrics.jsonl and fsynced, replace it
     (trainer/files.atomic_write: os.replace, atomic on POSIX, then the folder is fsynced).
An error before the replace undoes 1 (the superseded file is cut back to its old size, the temp
file removed) and is raised: metrics.jsonl is untouched. A crash of the node between 1 and 2
leaves the rows in both files, so a later resume moves them again: a duplicate in the superseded
file, never a loss.
"""

from __future__ import annotations

import dataclasses
import json
import os
import time
from pathlib import Path
from typing import IO, Any, Callable

from trainer.files import atomic_write

SUPERSEDED_SUFFIX = ".superseded.jsonl"


@dataclasses.dataclass(frozen=True)
class MoveResult:
    """What move_rows_after did. `unusable_lines`: 1-based numbers of the non-blank lines that are
    not JSON objects with an integer "step" (a torn last line, a hand edit); they stay in place."""

    moved: int
    steps: tuple[int, int] | None  # lowest and highest moved step, None when nothing moved
    target: Path
    unusable_lines: tuple[int, ...]


def superseded_path(path: Path) -> Path:
    """metrics.jsonl -> metrics.superseded.jsonl (same folder)."""
    path = Path(path)
    return path.with_name(path.name.removesuffix(".jsonl") + SUPERSEDED_SUFFIX)


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def move_rows_after(path: Path, step: int, *, now: Callable[[], str] = utc_now) -> MoveResult:
    """Move the rows of the JSONL file `path` whose integer "step" is > `step` to its superseded
    sibling; keep every other line, byte for byte, in its order. With nothing to move, no file is
    written or created. Raises OSError (after undoing its own writes) when the disk refuses.

    The file is read whole: at one row per log step it stays in the tens of MB for long runs.
    """
    path = Path(path)
    target = superseded_path(path)
    if not path.is_file():
        return MoveResult(0, None, target, ())
    keep: list[bytes] = []
    moved: list[bytes] = []
    moved_steps: list[int] = []
    unusable: list[int] = []
    stamp = now()
    with open(path, "rb") as f:
        for number, line in enumerate(f, 1):
            row, row_step = parse_row(line)
            if row_step is not None and row_step > step:
                row["superseded_at"] = stamp
                row["resumed_from_step"] = step
                # ensure_ascii (the default) keeps the file ASCII, as JsonlSink writes it.
                moved.append((json.dumps(row) + "\n").encode("ascii"))
                moved_steps.append(row_step)
                continue
            if row_step is None and line.strip():
                unusable.append(number)
            # A torn last line (a crash mid-write) gets its newline, so the next row starts a line.
            keep.append(line if line.endswith(b"\n") else line + b"\n")
    if not moved:
        return MoveResult(0, None, target, tuple(unusable))

    old_size = target.stat().st_size if target.exists() else None
    original = path.stat().st_ino
    def write_kept(f: IO[bytes]) -> None:
        f.writelines(keep)
        # Inside atomic_write, before its rename: the copies are on disk before the originals go.
        _append_synced(target, moved)

    try:
        atomic_write(path, write_kept)
    except BaseException:
        # Undo only while metrics.jsonl is still the original file: once replaced (an interrupt
        # right after the rename), the superseded file holds the only copies of the moved rows.
        if _inode(path) == original:
            _undo(target, old_size)
        raise
    return MoveResult(len(moved), (min(moved_steps), max(moved_steps)), target, tuple(unusable))


def parse_row(line: bytes | str) -> tuple[dict[str, Any] | None, int | None]:
    """(row, its integer step) or (row or None, None) for a line that is not a stepped row (also
    what scripts/compare_losses.py skips, so both read a metrics.jsonl alike)."""
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # ValueError covers bad JSON and bytes that are not UTF-8
        return None, None
    if not isinstance(row, dict):
        return None, None
    step = row.get("step")
    # bool is an int in Python; a "step": true row is not one to judge by its step.
    if isinstance(step, int) and not isinstance(step, bool):
        return row, step
    return row, None


def _append_synced(path: Path, lines: list[bytes]) -> None:
    with open(path, "ab") as f:
        f.writelines(lines)
        f.flush()
        os.fsync(f.fileno())


def _inode(path: Path) -> int | None:
    try:
        return path.stat().st_ino
    except OSError:
        return None


def _undo(target: Path, old_size: int | None) -> None:
    """Cut the superseded file back (atomic_write has removed its temp file). Best effort: an undo
    that fails leaves extra copies behind, never fewer rows."""
    try:
        if old_size is None:
            target.unlink(missing_ok=True)
        elif target.exists():
            os.truncate(target, old_size)
    except OSError:
        pass
