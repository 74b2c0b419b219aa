"""kernels/attention/bench.py on CPU: every code path of the table and the sweep runs (timing is
stubbed, Triton runs interpreted, SDPA backends that need CUDA report n/a), so a GPU run of the
benchmark does not die on a Python error."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from kernels.attention import bench, triton_bwd, triton_fwd, triton_op  # noqa: E402


@pytest.fixture(autouse=True)
def interpreted_stub_timing(monkeypatch):
    if not triton_op.interpreted():
        importlib.reload(triton_fwd)
        importlib.reload(triton_bwd)
    calls = []

    def fake_time(fn):
        fn()
        calls.append(1)
        return 1.0

    monkeypatch.setattr(bench, "_time", fake_time)
    yield calls


def test_table_rows_for_plain_and_document_shapes(interpreted_stub_timing):
    rows: list[str] = []
    bench._bench_shape("tiny", rows, (1, 4, 2, 40, 16, 0), device="cpu", dtype=torch.float16)
    bench._bench_shape("tiny-docs", rows, (1, 4, 2, 40, 16, 8), device="cpu", dtype=torch.float16)
    text = "\n".join(rows)
    assert text.count("| tiny | triton |") == 1 and "| tiny | triton (atomic dQ) |" in text
    assert "| tiny | triton (TMA fwd, atomic dQ) |" in text
    assert "| tiny-docs | triton |" in text and "sdpa efficient, bool mask" in text
    assert "sdpa cudnn" in text  # measured on CUDA, "n/a: ..." on CPU
    assert triton_op.DQ_MODE == "recompute" and not triton_op.FWD_TMA  # restored after variants
    assert interpreted_stub_timing  # the timed closures really ran


def test_sweep_rows_cover_every_config():
    rows: list[str] = []
    bench._sweep(rows, (1, 2, 1, 32, 16, 0), device="cpu", dtype=torch.float16)
    expected = 2 * len(triton_fwd.FWD_CONFIGS) + 2 * len(triton_bwd.DKDV_CONFIGS)
    assert len(rows) == expected + len(triton_bwd.DQ_CONFIGS)
    assert not any("n/a" in r for r in rows)
    assert triton_op.CONFIG_OVERRIDE == {} and triton_op.DQ_MODE == "recompute"
    assert not triton_op.FWD_TMA


def test_flops_count_documents_within_documents():
    assert bench._flops_fwd(1, 2, 8, 4, 0) == 4.0 * 2 * 32 * 4
    assert bench._flops_fwd(1, 1, 10, 1, 4) == 4.0 * (2 * 16 + 4) / 2


def test_cpu_main_says_it_needs_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    assert bench.main([]) == 0
    assert "needs CUDA" in capsys.readouterr().out
