"""One environment variable set for a block of code (benchmarks and tools switch kernel variants and
caches through environment variables read at call or compile time)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator


@contextlib.contextmanager
def scoped_env(name: str, value: str | None) -> Iterator[None]:
    """Set `name` to `value` (None: leave it as it is) inside the block; restore it afterwards."""
    old = os.environ.get(name)
    if value is not None:
        os.environ[name] = value
    try:
        yield
    finally:
        if old is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = old
