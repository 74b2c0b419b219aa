"""`python -m kernels.bench <op>` on a machine without CUDA: every op says why it measured nothing and
exits with status 2, so a script or sweep that checks the status does not take it for a result."""

import pytest
import torch

from kernels import bench


@pytest.mark.parametrize("op", sorted(bench.OPS))
def test_every_op_without_cuda_exits_2_and_says_why(op, capsys):
    if torch.cuda.is_available():
        pytest.skip("has CUDA: the bench would measure")
    assert bench.main([op]) == 2
    out = capsys.readouterr().out
    assert "nothing to" in out and ("CUDA" in out or "H100" in out), out


def test_unknown_op_prints_usage_and_exits_2(capsys):
    assert bench.main(["nope"]) == 2
    assert "usage: python -m kernels.bench" in capsys.readouterr().err
