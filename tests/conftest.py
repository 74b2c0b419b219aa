"""Shared pytest setup: GPU tests are skipped without CUDA; tests run with a fixed seed."""

import os

import pytest

# Small CPU tests must not oversubscribe the 2-core CI machine (each gloo rank is its own process).
os.environ.setdefault("OMP_NUM_THREADS", "1")

try:
    import torch as _torch

    # Without a GPU, Triton kernels can only run in its interpreter; it must be chosen before any
    # module imports triton (some imports, e.g. torch._dynamo, pull it in early).
    if not _torch.cuda.is_available():
        os.environ.setdefault("TRITON_INTERPRET", "1")
except ImportError:
    pass


def pytest_collection_modifyitems(config, items):
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:
        has_cuda = False
    if has_cuda:
        return
    skip = pytest.mark.skip(reason="needs CUDA (run on the GPU machine)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
