"""Tokenize .txt / .jsonl / .parquet files or a HF dataset into titankit token shards.

    python scripts/prepare_data.py --input 'corpus/*.jsonl' --output data/shards \
        --tokenizer path/to/tokenizer.json --workers 8

Resumable: rerunning the same command skips work units whose shards are already complete.
The folder is ready only once COMPLETE.json exists (written last); training refuses it before.
One run per output folder at a time (a lock file inside it). Inputs that give fewer tokens than any
training run needs (2: one sample of seq_len + 1 with seq_len = 1) are refused and nothing is marked
complete; a folder this run created is removed again when nothing is left to resume. A folder made
before markers existed, whose inputs are gone:
`python scripts/prepare_data.py --mark-complete --output data/shards`.
Train on the result with `--data.dataset data/shards --data.tokenizer path/to/tokenizer.json`.
The logic lives in trainer/data/prepare.py.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from pathlib import Path

# Run from a checkout without installing: the repository root holds the `trainer` package.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from trainer.data.prepare import DEFAULT_SHARD_TOKENS, DEFAULT_UNIT_BYTES, mark_complete, prepare  # noqa: E402


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--input", nargs="+", metavar="PATH_OR_GLOB",
                   help="files, folders, globs (quote them) or hf:NAME[:split]; .txt = one document per file, "
                        ".jsonl = one per line, .parquet = one per row")
    p.add_argument("--output", required=True, help="folder of the shards (created; reused to resume)")
    p.add_argument("--tokenizer", default="bytes", help="'bytes' or the path of a HF tokenizer.json")
    p.add_argument("--workers", type=int, default=min(8, os.cpu_count() or 1), help="tokenizing processes")
    p.add_argument("--text-key", default="text", help="field (.jsonl) or column (.parquet, hf:) holding the text")
    p.add_argument("--shard-tokens", type=int, default=DEFAULT_SHARD_TOKENS, help="most tokens per shard file")
    p.add_argument("--unit-mb", type=float, default=DEFAULT_UNIT_BYTES / 2**20,
                   help="input text per work unit (the grain of parallelism and of resuming)")
    p.add_argument("--mark-complete", action="store_true",
                   help="only write COMPLETE.json for a finished --output folder made before markers existed "
                        "whose inputs are gone (otherwise rerun the command that made it)")
    args = p.parse_args(argv)
    if args.mark_complete and args.input:
        p.error("--mark-complete takes only --output (to finish a folder, rerun the command with its --input)")
    if not args.mark_complete and not args.input:
        p.error("the following arguments are required: --input")
    try:
        # max(1, ...) below keeps a tiny size a valid unit of one byte; 0, a negative size or NaN
        # would become one too (a shard pair per input byte), and inf cannot become an int.
        if not (math.isfinite(args.unit_mb) and args.unit_mb > 0):
            raise ValueError(f"--unit-mb must be a number > 0 (MB of input text per work unit; default "
                             f"{DEFAULT_UNIT_BYTES / 2**20:g}), got {args.unit_mb:g}")
        if args.mark_complete:
            mark_complete(args.output)
            return 0
        prepare(
            args.input,
            args.output,
            tokenizer=args.tokenizer,
            workers=args.workers,
            text_key=args.text_key,
            shard_tokens=args.shard_tokens,
            unit_bytes=max(1, int(args.unit_mb * 2**20)),
        )
    except (ValueError, OSError) as e:  # an OSError's message names its file: an unreadable input, say
        print(f"prepare_data: error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
