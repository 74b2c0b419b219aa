"""What to tell a user whose data.dataset is not a folder of token shards, and the command that makes one.

data.dataset is "embedded" or a folder made by scripts/prepare_data.py. Users often name the raw
corpus instead (a .jsonl file, a glob of .txt files); the fix is then to tokenize that corpus into a
new folder beside it and train on the folder. The command must take their path as --input: handing
it back as --output made prepare_data try to create a folder where their file is.
Used by the config check before start-up (trainer/config/validate.py) and by build_dataset.
"""

from __future__ import annotations

import glob
import re
import shlex
from pathlib import Path

from .shards import COMPLETE_MARKER

# The inputs prepare_data reads. Defined here, and imported by trainer/data/prepare.py, so that a
# config check does not import the preparation machinery.
RAW_SUFFIXES = (".txt", ".jsonl", ".parquet")


def has_magic(spec: str) -> bool:
    """Whether `spec` is a glob pattern (glob.glob's own test)."""
    return any(c in spec for c in "*?[")


def _shard_folder_of(path: Path) -> Path | None:
    """The shard folder holding `path` when `path` is one of its shard or marker files."""
    if path.suffix not in (".bin", ".json"):
        return None
    folder = path.parent
    if (folder / COMPLETE_MARKER).is_file() or any(folder.glob("shard-*.json")):
        return folder
    return None


def sibling_folder(spec: str) -> Path:
    """A new folder beside the raw input(s) `spec` for their shards: corpus.jsonl -> corpus_shards,
    a glob corpus-*.jsonl -> corpus_shards (the pattern's fixed part), *.txt -> shards. Skips names
    taken by a file (a folder of that name may be an earlier run of the same command: reused)."""
    path = Path(spec).expanduser().absolute()
    parent = path.parent
    while has_magic(str(parent)):  # a/*/b.txt: beside the pattern's fixed part, a/
        parent = parent.parent
    stem = re.sub(r"[*?]|\[[^\]]*\]", "", path.stem).strip("-_. ")
    base = f"{stem}_shards" if stem else "shards"
    candidate, n = parent / base, 2
    while candidate.exists() and not candidate.is_dir():
        candidate, n = parent / f"{base}_{n}", n + 1
    return candidate


def dataset_problem(spec: str, tokenizer: str) -> tuple[str, str]:
    """(what is wrong with data.dataset = `spec`, what to do) for a value that is neither "embedded"
    nor an existing folder; the second part starts with a verb phrase that follows "; ".

    A file, a glob or a path named like a raw corpus file gets the prepare_data command that takes it
    as --input and writes a sibling folder, plus the --data.dataset that trains on the result; a
    shard file points at its folder; any other missing path is taken for the folder the user means
    to make."""
    path = Path(spec).expanduser().absolute()
    tok = shlex.quote(tokenizer)
    if path.exists() and not path.is_dir():
        folder = _shard_folder_of(path)
        if folder is not None:
            return (f"{path} is a file of the token shard folder {folder}, not a folder",
                    f"train on the folder: --data.dataset={shlex.quote(str(folder))}")
        found = f"{path} is a file, not a folder"
        what = "this file"
    elif has_magic(spec):
        matches = [p for p in glob.glob(str(path), recursive=True) if Path(p).is_file()]
        found = (f"{spec} is a pattern of files ({len(matches)} match now), not a folder" if matches
                 else f"{spec} is a pattern of files that matches none, not a folder")
        what = "these files"
    elif path.suffix in RAW_SUFFIXES:
        found = f"no file or folder at {path}"
        what = f"the {path.suffix} file"
    else:
        return (f"no folder at {path}",
                "data.dataset is \"embedded\" or a folder of token shards, made with python "
                f"scripts/prepare_data.py --input FILES --output {shlex.quote(spec)} --tokenizer {tok}")
    out = shlex.quote(str(sibling_folder(spec)))
    source = shlex.quote(spec if has_magic(spec) else str(path))  # a glob quoted: prepare_data expands it
    kinds = "" if path.suffix in RAW_SUFFIXES else f" (it reads {', '.join(RAW_SUFFIXES)} files)"
    return (found,
            f"data.dataset is \"embedded\" or a folder of token shards: make one from {what} with python "
            f"scripts/prepare_data.py --input {source} --output {out} --tokenizer {tok}{kinds}, "
            f"then train with --data.dataset={out}")
