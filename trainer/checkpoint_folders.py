"""Step folders of a checkpoint directory: which ones are complete, which to keep, what they hold.

A DCP checkpoint is a folder of shard files (`__<rank>_<i>.distcp`) plus `.metadata`, which DCP's
coordinator writes last (temp file, then rename) once every rank has reported its shards written.
Here a folder counts as complete only when `.metadata` parses AND every shard it references exists
and is at least as long as the byte ranges recorded for it: a disk-full write, a copy cut short or a
deleted shard is caught before any rank starts loading, and the previous complete folder is used.
Bytes damaged in place are found by the checksums in the folder's `.checksums/` subfolder
(trainer/checkpoint_checksums.py); nothing here reads that subfolder, and it moves, and goes, with
its step folder (set_aside, apply_retention).
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import socket
from pathlib import Path
from typing import Any

import torch
from torch.distributed.checkpoint import FileSystemReader
from torch.distributed.checkpoint.metadata import BytesStorageMetadata, Metadata, TensorStorageMetadata

from trainer.files import atomic_write
from trainer.log import logger

STEP_RE = re.compile(r"^step-(\d+)$")
# A step folder renamed for deletion (delete_step_folder): hidden, and never a STEP_RE name.
TRASH_RE = re.compile(r"^\.step-\d+\.deleting$")


def step_folder(root: Path, step: int) -> Path:
    return Path(root) / f"step-{step}"


def list_step_folders(root: Path) -> list[tuple[int, Path]]:
    """All `step-N` folders under root (complete or not), sorted by N."""
    root = Path(root)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        match = STEP_RE.match(child.name)
        if match and child.is_dir():
            found.append((int(match.group(1)), child))
    return sorted(found)


def read_metadata(path: Path) -> Metadata:
    return FileSystemReader(str(path)).read_metadata()


def shard_lengths(metadata: Metadata) -> dict[str, int]:
    """The shard files a checkpoint's metadata references (relative paths) and the bytes each must
    hold: the end of the furthest item stored in it."""
    need: dict[str, int] = {}
    storage = metadata.storage_data if isinstance(metadata.storage_data, dict) else {}
    for info in storage.values():
        rel = getattr(info, "relative_path", None)
        if rel is None:
            continue
        need[rel] = max(need.get(rel, 0), int(info.offset) + int(info.length))
    return need


def incomplete_reason(path: Path) -> str | None:
    """None when `path` is a complete DCP checkpoint, else why it is not (for a warning)."""
    path = Path(path)
    if not (path / ".metadata").is_file():
        return "it has no .metadata (the save did not finish)"
    try:
        metadata = read_metadata(path)
    except Exception as exc:  # a truncated pickle raises EOFError, UnpicklingError, ...
        return f"its .metadata is unreadable ({type(exc).__name__}: {exc})"
    for rel, n_bytes in sorted(shard_lengths(metadata).items()):
        shard = path / rel
        if not shard.is_file():
            return f"its shard {rel} is missing"
        size = shard.stat().st_size
        if size < n_bytes:
            return f"its shard {rel} is truncated ({size} bytes; the metadata needs {n_bytes})"
    return None


def complete_step_folders(root: Path, warn: bool = True) -> list[tuple[int, Path]]:
    """The complete `step-N` folders under root, sorted by N; incomplete ones warn (when `warn`)."""
    complete = []
    for step, path in list_step_folders(root):
        reason = incomplete_reason(path)
        if reason is None:
            complete.append((step, path))
        elif warn:
            logger.warning(f"checkpoint {path} is skipped: {reason}")
    return complete


def resolve_checkpoint(path: Path, name: str, warn: bool = True) -> Path:
    """A complete checkpoint named by `path`: a step folder itself (one with .metadata or named
    step-N), or a folder of step-N folders (a run's checkpoint/), meaning its newest complete one.
    checkpoint.initial_load_path and scripts/convert_checkpoint.py both take a path this way, so one
    path means one checkpoint to both. `name` starts each error (the key or argument)."""
    if path.exists() and not path.is_dir():
        # A file of the checkpoint itself (its .metadata or a shard, picked in a file dialog or by
        # tab completion) names the step folder that holds it: say so, not "no such folder".
        if (path.parent / ".metadata").is_file():
            raise ValueError(f"{name} is a file, not a folder: it lies in the checkpoint "
                             f"{path.parent}; pass that folder")
        raise ValueError(f"{name} is a file, not a folder; pass a step folder "
                         "(<run>/checkpoint/step-N) or a run's checkpoint/ folder")
    if not path.is_dir():
        raise ValueError(f"{name}: no such folder; pass a step folder (<run>/checkpoint/step-N) or "
                         "a run's checkpoint/ folder")
    if (path / ".metadata").exists() or STEP_RE.match(path.name):
        reason = incomplete_reason(path)
        if reason is not None:
            raise ValueError(f"{name} is not a complete checkpoint: {reason}")
        return path
    complete = complete_step_folders(path, warn=warn)
    if complete:
        return complete[-1][1]
    found = list_step_folders(path)
    if found:
        what = "; ".join(f"{p.name}: {incomplete_reason(p)}" for _, p in found[-5:])
        what = f"step folders found, none complete ({len(found)}, the newest 5 at most): {what}"
    else:
        what = "it holds no step-N folder"
        if (path / "checkpoint").is_dir():
            what += f" (it looks like a run folder: did you mean {path / 'checkpoint'}?)"
    raise ValueError(f"{name} is neither a checkpoint (it has no .metadata) nor a folder with a "
                     f"complete step-N checkpoint: {what}; pass a complete step folder, e.g. "
                     "<run>/checkpoint/step-N")


def apply_retention(root: Path, keep: int) -> list[Path]:
    """Delete all but the newest `keep` complete folders (keep 0 = keep all); returns what went.

    Also removes incomplete folders older than the newest complete one: they are leftovers of saves
    that died and can never be loaded. Never touches the newest complete folder (keep >= 2 is
    enforced by the config) or anything newer than it (a save may be in flight there).
    """
    remove_trash(root)  # before `keep`: a run may relaunch with keep_latest_k = 0
    if keep <= 0:
        return []
    complete = complete_step_folders(root, warn=False)
    if not complete:
        return []
    newest = complete[-1][0]
    complete_paths = {p for _, p in complete}
    doomed = [p for _, p in complete[:-keep]]
    doomed += [p for s, p in list_step_folders(root) if s < newest and p not in complete_paths]
    for path in doomed:
        delete_step_folder(path)
        logger.info(f"checkpoint retention (keep_latest_k = {keep}): removed {path}")
    return doomed


def delete_step_folder(path: Path) -> None:
    """Delete step folder `path` so that a crash midway leaves nothing that looks like a checkpoint.

    rmtree removes files in directory order: cut short, it could leave `.metadata` and the shards
    without `.checksums/` (complete, loaded unverified) or without a shard. So the folder is first
    renamed out of the `step-N` namespace to a hidden `.step-N.deleting` in the same parent (one
    atomic rename), then removed; a leftover of that name is ignored by every resume (STEP_RE) and
    removed by the next retention (remove_trash)."""
    path = Path(path)
    if path.is_symlink():
        shutil.rmtree(path)  # raises OSError as before: neither the link nor its target is renamed
    trash = path.with_name(f".{path.name}.deleting")
    if trash.exists():  # the same step's earlier deletion died midway: it is trash already
        shutil.rmtree(trash)
    path.rename(trash)
    shutil.rmtree(trash)


def remove_trash(root: Path) -> None:
    """Finish the deletions (delete_step_folder) that a crash cut short in root."""
    root = Path(root)
    if not root.is_dir():
        return
    for child in sorted(root.iterdir()):
        if TRASH_RE.match(child.name) and child.is_dir() and not child.is_symlink():
            shutil.rmtree(child)
            logger.info(f"checkpoint retention: removed {child}, left by a deletion cut short")


def set_aside(path: Path, why: str) -> Path:
    """Rename a complete folder (or a file in a step folder's place) out of the `step-N` namespace
    (never delete a user's checkpoint)."""
    target = path.with_name(f"{path.name}.superseded")
    n = 1
    while target.exists():
        n += 1
        target = path.with_name(f"{path.name}.superseded{n}")
    path.rename(target)
    logger.warning(f"checkpoint {path} renamed to {target.name}: {why}")
    return target


def set_aside_note(root: Path, step: int) -> str:
    """For an error saying that step-{step} is not a complete checkpoint: the complete folders
    set_aside renamed from it (step-N.superseded, .superseded2, ...) and how to load one; '' when
    there are none. Without it the user learns only that the step is gone, though it is kept whole."""
    root = Path(root)
    pattern = re.compile(rf"^step-{step}\.superseded(\d*)$")
    aside = sorted((int(m.group(1) or 1), p) for p in (root.iterdir() if root.is_dir() else [])
                   if (m := pattern.match(p.name)) and p.is_dir() and incomplete_reason(p) is None)
    if not aside:
        return ""
    target = step_folder(root, step)
    # mv onto an existing folder would move the checkpoint inside it.
    away = (f"move the incomplete {target.name} out of the way, then "
            if target.exists() or target.is_symlink() else "")
    names = ", ".join(p.name for _, p in aside)
    example = "e.g. " if len(aside) > 1 else ""
    return (f"; step-{step} was set aside as {names} (complete) by the first save of a run that "
            f"resumed from an earlier step: to load it, {away}rename it back ({example}mv "
            f"{shlex.quote(str(aside[-1][1]))} {shlex.quote(str(target))}) and relaunch")


# The rewinds checkpoint.load_step applied in this checkpoint folder, oldest first (README):
#   {"rewinds": [{"load_step": 4, "newest_before": 8, "applied_at": "2026-01-01T00:00:00Z",
#                 "first_save": 12}]}
# newest_before: the newest complete step when the rewind was applied (None: there was none newer);
# first_save: None until the rewound run's first save has set the abandoned steps (those after
# load_step) aside, then that save's step: complete steps after load_step are then its own progress.
LOAD_STEP_RECORD = "load_step.json"


def read_load_step_record(root: Path) -> list[dict[str, Any]]:
    """The rewinds recorded in root (oldest first; [] when there is no record)."""
    path = Path(root) / LOAD_STEP_RECORD
    if not path.is_file():
        return []
    try:
        rewinds = json.loads(path.read_text())["rewinds"]
        if not isinstance(rewinds, list) or not all(
                isinstance(r, dict) and isinstance(r.get("load_step"), int) for r in rewinds):
            raise ValueError("'rewinds' is not a list of {'load_step': int, ...}")
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise ValueError(
            f"{path} (the record of the rewinds checkpoint.load_step applied here) is unreadable "
            f"({type(exc).__name__}: {exc}); without it a relaunch cannot tell whether this "
            "load_step was already applied. Delete the file to apply checkpoint.load_step anyway, "
            "or set checkpoint.load_step = -1 to continue from the newest checkpoint") from exc
    return rewinds


def unsaved_rewind(rewinds: list[dict[str, Any]], load_step: int) -> dict[str, Any] | None:
    """The record's last entry when it is a rewind to load_step whose first save has not happened
    yet (its first_save is None), else None."""
    last = rewinds[-1] if rewinds else None
    if last is not None and last["load_step"] == load_step and last.get("first_save") is None:
        return last
    return None


def write_load_step_record(root: Path, rewinds: list[dict[str, Any]]) -> None:
    """Replace root's rewind record atomically (a temp file renamed over it): a crash leaves the old
    record or the new one, never half of one."""
    root = Path(root)
    root.mkdir(parents=True, exist_ok=True)
    text = json.dumps({"rewinds": rewinds}, indent=1) + "\n"
    atomic_write(root / LOAD_STEP_RECORD, lambda f: f.write(text.encode()))


def write_problem(root: Path) -> str | None:
    """Why checkpoints cannot be written into `root` (None: they can). Makes `root` when missing,
    then creates, writes and removes a probe file with a name of its own (host and pid), so nothing
    already in the folder is touched, and ranks of several nodes can probe one shared folder."""
    root = Path(root)
    if root.exists() and not root.is_dir():
        return "it exists and is a file, not a folder"
    try:
        root.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        return f"it cannot be created: {exc.strerror or exc}"
    probe = root / f".write_test.{socket.gethostname()}.{os.getpid()}"
    try:
        with open(probe, "wb") as f:
            f.write(b"titankit")
            f.flush()
            os.fsync(f.fileno())
    except OSError as exc:
        return f"a file cannot be written into it: {exc.strerror or exc}"
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()
    return None


def remove_partial(path: Path) -> None:
    logger.warning(f"removing incomplete checkpoint folder {path} before saving the same step again")
    shutil.rmtree(path)


def check_model_fits(metadata: Metadata, model_sd: dict[str, Any], path: Path,
                     prefix: str = "model.") -> None:
    """Raise ValueError naming the first key whose saved shape differs from the model's.

    model_sd: the model's state dict as get_model_state_dict returns it (DTensor.shape is the
    global shape, so this is layout-independent). Runs before any rank starts reading tensors.
    """
    saved = metadata.state_dict_metadata
    hint = ("the checkpoint was saved by a model of another shape; check model.flavor and "
            "model.overrides against the run that saved it")
    for fqn, value in model_sd.items():
        md = saved.get(prefix + fqn)
        model_shape = tuple(value.shape) if isinstance(value, torch.Tensor) else None
        if md is None:
            raise ValueError(f"checkpoint {path}: key {fqn!r} of the model (shape {model_shape}) "
                             f"is not in the checkpoint; {hint}")
        if isinstance(md, BytesStorageMetadata) or model_shape is None:
            if isinstance(md, TensorStorageMetadata) != (model_shape is not None):
                raise ValueError(f"checkpoint {path}: key {fqn!r} is a tensor in only one of the "
                                 f"checkpoint and the model; {hint}")
            continue
        saved_shape = tuple(md.size)
        if saved_shape != model_shape:
            raise ValueError(f"checkpoint {path}: key {fqn!r} has shape {saved_shape} in the "
                             f"checkpoint but {model_shape} in the model; {hint}")
    extra = [k[len(prefix):] for k in saved if k.startswith(prefix) and k[len(prefix):] not in model_sd]
    if extra:
        raise ValueError(f"checkpoint {path}: key {extra[0]!r} (shape "
                         f"{tuple(getattr(saved[prefix + extra[0]], 'size', ()))}) is in the checkpoint "
                         f"but not in the model ({len(extra)} such keys); {hint}")


def section_template(metadata: Metadata, prefix: str) -> dict[str, Any]:
    """A load target for the small sections (lr_scheduler, data, train, rng.rankR) built from what
    was saved, so that a key added or dropped by another torch version does not break a resume.

    Keys are the saved names without `prefix`; bytes items get None (DCP replaces them with the
    unpickled object), tensors an empty tensor of the saved size and dtype.
    """
    out: dict[str, Any] = {}
    for key, md in metadata.state_dict_metadata.items():
        if not key.startswith(prefix):
            continue
        rest = key[len(prefix):]
        if isinstance(md, TensorStorageMetadata):
            out[rest] = torch.empty(tuple(md.size), dtype=md.properties.dtype)
        else:
            out[rest] = None
    return out


def has_section(metadata: Metadata, name: str) -> bool:
    """Whether the checkpoint holds key `name` or keys under `name.`."""
    return any(k == name or k.startswith(name + ".") for k in metadata.state_dict_metadata)

