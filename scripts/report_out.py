"""The --out report file of the measuring scripts (project_hardware, layer_probe).

Checked before the measurement, so a typo in --out costs seconds rather than a whole run; the
parent folder is created, as bench_train and convert_checkpoint to-hf do for their outputs.
"""

from __future__ import annotations

import os
from pathlib import Path


def prepare_out(path: str, flag: str = "--out") -> Path:
    """`path` as a Path whose folder exists and can be written; ValueError naming it otherwise."""
    out = Path(path)
    if out.is_dir():
        raise ValueError(f"{flag} {path}: is a folder; pass a file name, e.g. {out / 'report.md'}")
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:  # a file where a folder should be, no permission, read-only disk
        raise ValueError(f"{flag} {path}: cannot create its folder {out.parent} ({err.strerror})") from None
    if not os.access(out.parent, os.W_OK) or (out.exists() and not os.access(out, os.W_OK)):
        raise ValueError(f"{flag} {path}: not writable")
    return out


def write_out(out: Path, text: str, flag: str = "--out") -> None:
    """Write the report; a failure after the work names the file (the report was printed already)."""
    try:
        out.write_text(text + "\n")
    except OSError as err:
        raise ValueError(f"{flag} {out}: cannot write it ({err.strerror}); the report above is not saved") from None
