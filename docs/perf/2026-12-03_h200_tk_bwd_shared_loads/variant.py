"""Applies (or, with `revert`, undoes) ab.py's variant in the working tree's kernel sources, so that
the ops and Nsight Compute see it: python3 variant.py apply|revert"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from ab import REVERT  # noqa: E402

from kernels.thunderkittens import build  # noqa: E402

for name, tree, head in REVERT:
    src, dst = (head, tree) if sys.argv[1] == "apply" else (tree, head)
    f = build.SRC_DIR / name
    text = f.read_text()
    assert text.count(src) == 1, (f, src)
    Path(f).write_text(text.replace(src, dst))
