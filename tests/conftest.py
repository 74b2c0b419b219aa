"""Shared pytest setup: GPU tests are skipped without CUDA; tests run with a fixed seed."""

import os

import pytest

# Small CPU tests must not oversubscribe the 2-core CI machine (each gloo rank is its own process).
os.environ.setdefault("OMP_NUM_THREADS", "1")


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
