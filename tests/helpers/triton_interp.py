"""A module fixture for tests of the Triton attention kernels in the CPU interpreter."""

from __future__ import annotations

import importlib

import pytest

from kernels.attention import triton_bwd, triton_fwd, triton_launch


@pytest.fixture(scope="module", autouse=True)
def interpreted_kernels():
    """If another test module imported the kernels compiled, re-decorate them interpreted."""
    if not triton_launch.interpreted():
        importlib.reload(triton_fwd)
        importlib.reload(triton_bwd)
    assert triton_launch.interpreted()
    yield
