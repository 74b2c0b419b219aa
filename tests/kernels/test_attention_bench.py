"""kernels/attention/bench.py and bench_sweep.py on CPU: every code path of the table and the sweep
runs (timing is stubbed, Triton runs interpreted, SDPA backends that need CUDA report n/a), so a
GPU run of the benchmark does not die on a Python error."""

from __future__ import annotations

import os

os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from kernels.attention import bench, bench_sweep, triton_launch  # noqa: E402
from kernels.attention import triton_bwd, triton_fwd  # noqa: E402


@pytest.fixture(autouse=True)
def interpreted_stub_timing(monkeypatch):
    if not triton_launch.interpreted():
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
    before = repr(triton_launch.SETTINGS)
    bench._bench_shape("tiny", rows, (1, 4, 2, 40, 16, 0), device="cpu", dtype=torch.float16)
    bench._bench_shape("tiny-docs", rows, (1, 4, 2, 40, 16, 8), device="cpu", dtype=torch.float16)
    text = "\n".join(rows)
    for label in ["triton (defaults)", *bench.TRITON_VARIANTS]:
        assert text.count(f"| tiny | {label} |") == 1, label
        assert f"| tiny-docs | {label} |" in text, label
    assert "sdpa efficient, bool mask" in text
    assert "sdpa cudnn" in text  # measured on CUDA, "n/a: ..." on CPU
    assert not any("n/a" in r for r in rows if "| triton" in r)
    assert repr(triton_launch.SETTINGS) == before  # variants restored the defaults
    assert interpreted_stub_timing  # the timed closures really ran


def test_sweep_runs_every_entry_and_combines_the_fastest():
    lines: list[str] = []
    combos = bench_sweep.run((1, 4, 1, 40, 16, 0), (1, 4, 1, 24, 16, 0), budget_s=1e9,
                             out=lines.append, device="cpu", dtype=torch.float32)
    text = "\n".join(lines)
    n_entries = len(bench_sweep.ENTRIES)
    entry_rows = [ln for ln in lines if ln.startswith("| fwd |") or ln.startswith("| pre |")
                  or ln.startswith("| dkdv |") or ln.startswith("| dq |")]
    assert len(entry_rows) == n_entries and "n/a" not in text and "skipped" not in text.split(
        "dK/dV split")[0]
    # Every variant computes what the first entry of its kernel computes (fp32 inputs here).
    for row in entry_rows:
        err = row.strip().strip("|").split("|")[-1].strip()
        assert err in ("", "baseline") or float(err) < 1e-5, row
    assert set(combos) == {"recompute", "atomic", "tma_atomic"}
    assert all(set(c["config_override"]) >= {"fwd", "dkdv"} for c in combos.values())
    assert text.count("| recompute | 1 |") == 1 and "| tma_atomic | 4 |" in text
    assert triton_launch.SETTINGS == triton_launch.Settings()


def test_sweep_budget_skips_entries():
    lines: list[str] = []
    bench_sweep.run((1, 2, 1, 16, 16, 0), (1, 2, 1, 16, 16, 0), budget_s=-1.0, out=lines.append,
                    device="cpu", dtype=torch.float32)
    assert sum("skipped (time budget)" in ln for ln in lines) == len(bench_sweep.ENTRIES)


def test_flops_count_documents_within_documents():
    assert bench._flops_fwd(1, 2, 8, 4, 0) == 4.0 * 2 * 32 * 4
    assert bench._flops_fwd(1, 1, 10, 1, 4) == 4.0 * (2 * 16 + 4) / 2


def test_cpu_main_says_it_needs_cuda(capsys):
    if torch.cuda.is_available():
        pytest.skip("has CUDA")
    assert bench.main([]) == 2  # measured nothing: not a success
    assert "needs CUDA" in capsys.readouterr().out


def test_thunderkittens_row_and_cooldown(interpreted_stub_timing, monkeypatch):
    """With TK available the table gains a "thunderkittens" row (here on CPU, with fp16 inputs, it
    says why it cannot run instead of stopping the table), none for the document shape (TK takes
    no document masks), and --cooldown idles before every row's measurement."""
    sleeps: list[float] = []
    monkeypatch.setattr(bench.time, "sleep", sleeps.append)
    rows: list[str] = []
    bench._bench_shape("tiny", rows, (1, 4, 2, 40, 16, 0), device="cpu", dtype=torch.float16,
                       with_tk=True, cooldown=0.5)
    bench._bench_shape("tiny-docs", rows, (1, 4, 2, 40, 16, 8), device="cpu",
                       dtype=torch.float16, with_tk=True)
    tk_rows = [r for r in rows if "| thunderkittens |" in r]
    assert len(tk_rows) == 1 and tk_rows[0].startswith("| tiny | thunderkittens | n/a: ")
    measured = [r for r in rows if r.startswith("| tiny |") and "n/a" not in r]
    assert measured and sleeps == [0.5] * len(measured)


def test_cooldown_must_not_be_negative(capsys):
    with pytest.raises(SystemExit):
        bench.main(["--cooldown", "-1"])
    assert "--cooldown must be >= 0" in capsys.readouterr().err
