"""CPU-only child processes for the gloo tests, also on a machine with GPUs.

The trainer takes a GPU whenever CUDA is visible, so a 2-rank CPU test on a one-GPU machine would
send its second rank to a device that does not exist (and a gloo group would meet CUDA tensors).
Children started through these helpers see no GPU and run Triton in its interpreter, as on CI.
"""

from __future__ import annotations

import os
from contextlib import contextmanager
from typing import Iterator

CPU_ONLY = {"CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}


def cpu_env(base: dict[str, str] | None = None, **extra: str) -> dict[str, str]:
    """An environment for a subprocess that must run on CPU."""
    return {**(os.environ if base is None else base), **CPU_ONLY, **extra}


@contextmanager
def cpu_children() -> Iterator[None]:
    """Processes spawned inside this block (multiprocessing inherits os.environ) run on CPU; this
    process keeps what it already had."""
    saved = {k: os.environ.get(k) for k in CPU_ONLY}
    os.environ.update(CPU_ONLY)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
