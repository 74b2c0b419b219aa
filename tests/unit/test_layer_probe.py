"""scripts/layer_probe.py on CPU: the block's GEMMs are found by shape (so the split of a real 70B
block on a GPU can be trusted to name the right matmuls), the fused variant really runs wider GEMMs,
and bad arguments get a clear error."""

import dataclasses
import importlib.util
import sys
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[2]
_spec = importlib.util.spec_from_file_location("layer_probe", ROOT / "scripts" / "layer_probe.py")
probe = importlib.util.module_from_spec(_spec)
sys.modules["layer_probe"] = probe
_spec.loader.exec_module(probe)

# debug flavor: dim 128, 8 heads of 16, 4 KV heads (K/V width 64), SwiGLU width 384.
FAST = ["--flavor", "debug", "--seq", "32", "--warmup", "1", "--iters", "2", "--lone-reps", "1",
        "--no-compile"]


def _gemm_rows(text: str, variant: str) -> dict[str, tuple[float, float]]:
    section = text.split(f"## {variant}:")[1].split("\n## ")[0]
    rows = {}
    for line in section.splitlines():
        if line.startswith("| ("):
            cells = [c.strip() for c in line.strip("|").split("|")]
            rows[cells[0]] = (float(cells[1]), float(cells[2]))
    return rows


def test_probe_names_each_gemm_of_the_block_by_shape(tmp_path, monkeypatch):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "new" / "probe.md"  # --out's folder is created, as bench_train does
    assert probe.main([*FAST, "--variants", "base,fused", "--out", str(out)]) == 0
    text = out.read_text()
    base = _gemm_rows(text, "base")
    # Per pass, (M, K, N): w1 and w3 forward plus w2's input gradient (32, 128, 384); w2 forward plus
    # the input gradients of w1 and w3 (32, 384, 128); wk and wv forward (32, 128, 64) and their input
    # gradients (32, 64, 128); weight gradients of w1 and w3 (384, 32, 128) and of w2 (128, 32, 384).
    expected = {"(32, 128, 384)": 3, "(32, 384, 128)": 3, "(32, 128, 64)": 2, "(32, 64, 128)": 2,
                "(384, 32, 128)": 2, "(128, 32, 384)": 1}
    assert {shape: base[shape][0] for shape in expected} == expected
    fused = _gemm_rows(text, "fused")
    assert fused["(32, 128, 768)"][0] == 1  # w1|w3 as one GEMM, its input and weight gradients
    assert fused["(32, 768, 128)"][0] == 1 and fused["(768, 32, 128)"][0] == 1
    assert fused["(32, 128, 256)"][0] == 1  # wq|wk|wv as one GEMM
    assert fused["(32, 128, 384)"][0] == 1  # only w2's input gradient is left at width 384
    assert fused["(32, 128, 256)"][0] == 1 and fused["(32, 256, 128)"][0] == 1  # wq|wk|wv, its dX
    for variant in ("base", "fused"):
        section = text.split(f"## {variant}:")[1]
        assert "forward+backward" in section.splitlines()[0]
        assert "| GEMM |" in section and "in the block," in section and " alone." in section


def test_probe_rejects_unknown_variants_and_sizes(capsys):
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--variants", "base,wide"])
    assert "valid names are base, fused" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--seq", "0"])
    assert "--seq" in capsys.readouterr().err


def test_out_that_cannot_be_written_is_refused_before_the_probe(tmp_path, capsys, monkeypatch):
    (tmp_path / "afile").write_text("x")
    monkeypatch.setattr(probe, "probe", lambda *a: pytest.fail("probed before checking --out"))
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--out", str(tmp_path / "afile" / "probe.md")])
    err = capsys.readouterr().err
    assert err.strip().splitlines()[-1].endswith(f"--out {tmp_path / 'afile' / 'probe.md'}: cannot create its "
                                                 f"folder {tmp_path / 'afile'} (File exists)")


@pytest.mark.skipif(torch.cuda.is_available(), reason="the CUDA-only backends run on a GPU")
@pytest.mark.parametrize("attention, refusal", [
    ("triton", "kernels.attention backend 'triton' needs CUDA tensors (got device cpu); on CPU use backend "
               "'sdpa' or 'reference', or set TRITON_INTERPRET=1 before importing triton (slow, for tests)"),
    ("thunderkittens", "kernels.thunderkittens attention (backend 'thunderkittens') needs CUDA tensors, got "
                       "device cpu"),
])
def test_cuda_only_attention_on_cpu_is_one_line(attention, refusal, capsys, monkeypatch):
    """The kernel's own refusal, raised in the real probe, is the one line (no traceback)."""
    from kernels.attention import triton_op

    # The tests run Triton interpreted (TRITON_INTERPRET=1); a CPU machine without it refuses.
    monkeypatch.setattr(triton_op, "interpreted", lambda: False)
    # ThunderKittens has head dims 64 and 128 only: the debug block with 2 heads of 64.
    monkeypatch.setitem(probe.LLAMA3_FLAVORS, "debug",
                        dataclasses.replace(probe.LLAMA3_FLAVORS["debug"], n_heads=2, n_kv_heads=1))
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--attention", attention, "--no-lone"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.strip().splitlines()[-1].split(": ", 1)[1].startswith(
        f"error: --attention {attention}, --norm torch on ")
    assert err.endswith(f": {refusal}\n")


def test_a_head_dim_the_backend_has_no_kernel_for_is_one_line(capsys):
    """The debug block's head dim 16: ThunderKittens was built for 64 and 128 only, and says so."""
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--attention", "thunderkittens", "--no-lone"])
    err = capsys.readouterr().err
    assert "Traceback" not in err
    assert err.endswith("kernels.thunderkittens attention (backend 'thunderkittens'): head dim 16 is not "
                        "supported; valid: (64, 128)\n"), err


def test_any_other_error_of_the_probe_keeps_its_traceback(capsys, monkeypatch):
    """A bug in the probe (a shape it got wrong) is not dressed up as a backend that cannot run here."""
    def shape_bug(*a):
        raise ValueError("mat1 and mat2 shapes cannot be multiplied (32x128 and 64x128)")

    monkeypatch.setattr(probe, "probe", shape_bug)
    with pytest.raises(ValueError, match="shapes cannot be multiplied"):
        probe.main([*FAST, "--no-lone"])
    assert "on CPU" not in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="the Triton FP8 backend runs on a GPU")
def test_a_float8_backend_that_cannot_run_here_is_one_line_before_the_probe(capsys, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")  # as on a CPU machine outside the tests
    monkeypatch.setattr(probe, "probe", lambda *a: pytest.fail("probed before checking --float8-backend"))
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--float8", "tensorwise", "--float8-backend", "triton"])
    err = capsys.readouterr().err
    assert "Traceback" not in err and err.strip().splitlines()[-1].endswith(
        "error: --float8 tensorwise --float8-backend triton: float8.backend = 'triton' needs a CUDA GPU "
        "(sm_90+); on CPU use 'torch', which emulates the FP8 GEMMs with the same quantization"), err


def test_gpu_kernels_are_tied_to_their_mm_by_external_id():
    """On CUDA the GEMM time is the kernels' (not the CPU operator's), found through External id."""
    events = [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "ts": 0, "dur": 50,
         "args": {"External id": 5, "Input Dims": [[8192, 8192], [8192, 1024]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::addmm", "ts": 60, "dur": 50,
         "args": {"External id": 6, "Input Dims": [[1024], [16, 32], [32, 1024]]}},
        {"ph": "X", "cat": "cpu_op", "name": "aten::add", "ts": 120, "dur": 5,
         "args": {"External id": 7, "Input Dims": [[8], [8]]}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_a", "ts": 100, "dur": 400, "args": {"External id": 5}},
        {"ph": "X", "cat": "kernel", "name": "nvjet_b", "ts": 600, "dur": 30, "args": {"External id": 6}},
        {"ph": "X", "cat": "kernel", "name": "add_kernel", "ts": 700, "dur": 3, "args": {"External id": 7}},
    ]
    assert probe.gemm_table(events) == {(8192, 8192, 1024): [400.0, 1], (16, 32, 1024): [30.0, 1]}


def test_probe_runs_the_block_in_fp8_through_the_trainers_conversion(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    out = tmp_path / "fp8.md"
    assert probe.main([*FAST, "--float8", "tensorwise", "--out", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("# Llama-3 debug block, batch 1 x seq 32, FP8 tensorwise (torch),")
    base = _gemm_rows(text, "base")
    assert base["(32, 128, 384)"][0] == 3  # the same GEMMs, now FP8 (emulated on CPU)
    assert "| aten::amax |" in text  # the dynamic scales: Float8Linear really ran
    assert "in the block," not in text  # no bf16 "alone" partner for FP8 GEMMs
    assert "not timed alone" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        probe.main([*FAST, "--float8", "tensorwise", "--variants", "fused"])
    assert "cannot be combined with --float8" in capsys.readouterr().err
