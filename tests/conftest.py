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


def _interpreter_numpy_clash() -> str | None:
    """triton 3.6's CPU interpreter (the one torch 2.11 ships with) fails every kernel test with
    "only 0-dimensional arrays can be converted to Python scalars" under numpy >= 2.4 (seen
    2026-12-01; numpy 2.3.5 passes, and triton 3.9 passes with numpy 2.4)."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return None
    try:
        import numpy
        import triton
    except ImportError:
        return None
    tri = tuple(int(p) for p in triton.__version__.split(".")[:2])
    npv = tuple(int(p) for p in numpy.__version__.split(".")[:2])
    if tri <= (3, 6) and npv >= (2, 4):
        return (f"triton {triton.__version__}'s interpreter fails the CPU kernel tests under numpy "
                f"{numpy.__version__}: pip install 'numpy<2.4' (or a newer triton)")
    return None


def pytest_report_header(config):
    clash = _interpreter_numpy_clash()
    return [f"WARNING: {clash}"] if clash else []


def pytest_terminal_summary(terminalreporter, exitstatus, config):
    clash = _interpreter_numpy_clash()
    if clash and exitstatus != 0:
        terminalreporter.write_line(f"WARNING: {clash}", yellow=True)


class TitankitLogs:
    """What titankit's logger emitted during a test. Its own handler writes to the stream of the
    test that set it up first, so neither caplog nor capsys sees it reliably; this handler does."""

    def __init__(self) -> None:
        import logging

        self.records: list = []
        self.handler = logging.Handler(logging.DEBUG)
        self.handler.emit = self.records.append

    def at(self, level: int, containing: str = "") -> list[str]:
        """The messages logged at exactly `level` that contain `containing`."""
        return [r.getMessage() for r in self.records if r.levelno == level and containing in r.getMessage()]


@pytest.fixture
def logs():
    """titankit's log records of this test, every level (the logger is set to DEBUG meanwhile)."""
    import logging

    from trainer.log import logger

    captured = TitankitLogs()
    old_level = logger.level
    logger.addHandler(captured.handler)
    logger.setLevel(logging.DEBUG)
    yield captured
    logger.removeHandler(captured.handler)
    logger.setLevel(old_level)


@pytest.fixture(autouse=True)
def _titankit_logger_as_before():
    """A Trainer built in the test process sets the project's loggers up once (a stream handler, no
    propagation): undone after each test, so that a later test's caplog does not depend on which
    tests ran before it."""
    import logging

    logs = [logging.getLogger(name) for name in ("titankit", "kernels")]
    before = [(list(log.handlers), log.propagate, log.level) for log in logs]
    yield
    for log, (handlers, propagate, level) in zip(logs, before):
        log.handlers[:] = handlers
        log.propagate, log.level = propagate, level
