"""Verify a checkpoint's files against their recorded checksums offline, in one process:

    python -m trainer.checkpoint_verify outputs/llama3_8b/checkpoint/step-1000
    python -m trainer.checkpoint_verify outputs/llama3_8b/checkpoint    # its newest complete step

One line per file (ok, DAMAGED or UNVERIFIED: no readable checksum), then a summary. Exit status 0
when every file matches its checksum, 1 otherwise (damage, files that cannot be verified, or no
complete checkpoint). The same check a run makes before it loads a step (trainer/checkpoint.py),
for a copy to another cluster, a backup, or before scripts/convert_checkpoint.py to-hf.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from trainer.checkpoint_checksums import check_files, expected_checksums
from trainer.checkpoint_errors import size
from trainer.checkpoint_folders import read_metadata, resolve_checkpoint, shard_lengths


def verify(path: Path, out=sys.stdout) -> int:
    """Print the verdict on each file of the checkpoint `path` names; returns the exit status."""
    try:
        step = resolve_checkpoint(path, str(path))
    except ValueError as exc:
        print(f"error: {exc}", file=out)
        return 1
    t0 = time.perf_counter()
    expected = expected_checksums(step)
    files = sorted({".metadata", *shard_lengths(read_metadata(step)), *expected.files})
    width = max(len(n) for n in files)
    bad = unverified = 0
    for name in files:
        if name not in expected.files:
            unverified += 1
            print(f"UNVERIFIED {name:<{width}}  no readable checksum", file=out)
            continue
        damaged = check_files(step, expected.files, [name])
        n, crc = expected.files[name]
        if damaged:
            bad += 1
            print(f"DAMAGED    {name:<{width}}  {damaged[0][1]}", file=out)
        else:
            print(f"ok         {name:<{width}}  {n:,} bytes, CRC32 {crc:08x}", file=out)
    for note in expected.notes:
        print(f"note: {note}", file=out)
    total = sum(expected.files[n][0] for n in files if n in expected.files)
    print(f"{step}: {len(files)} files, {len(files) - bad - unverified} ok, {bad} damaged, "
          f"{unverified} unverified ({size(total)} checked in {time.perf_counter() - t0:.2f}s)",
          file=out)
    return 0 if bad == 0 and unverified == 0 else 1


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m trainer.checkpoint_verify",
        description="Check a checkpoint step folder's files against the CRC32 checksums recorded "
                    "when it was saved; exit status 0 when all match.")
    parser.add_argument("path", help="a step folder (<run>/checkpoint/step-N), or a run's checkpoint/ "
                                     "folder (its newest complete step)")
    return verify(Path(parser.parse_args(argv).path))


if __name__ == "__main__":
    sys.exit(main())
