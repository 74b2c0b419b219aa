"""kernels.thunderkittens on CPU: the errors a user without ThunderKittens or a Hopper GPU sees, the
build flags, the custom ops' fake implementations, input validation, and (where nvcc and a
ThunderKittens clone exist) that every CUDA source compiles for sm_90a without register spills."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from kernels.thunderkittens import build, ops

REPO = Path(__file__).resolve().parents[2]


def test_missing_thunderkittens_says_how_to_get_it(monkeypatch):
    monkeypatch.delenv("THUNDERKITTENS_ROOT", raising=False)
    with pytest.raises(build.ThunderKittensUnavailable) as err:
        build.extension()
    msg = str(err.value)
    assert "\n" not in msg
    assert msg.startswith(
        "ThunderKittens not found: git clone https://github.com/HazyResearch/ThunderKittens and "
        "set THUNDERKITTENS_ROOT=<clone>"
    )
    assert "not set" in msg


def test_wrong_thunderkittens_root_is_named(monkeypatch, tmp_path):
    monkeypatch.setenv("THUNDERKITTENS_ROOT", str(tmp_path))
    with pytest.raises(build.ThunderKittensUnavailable, match="ThunderKittens not found") as err:
        build.extension()
    assert str(tmp_path) in str(err.value) and "include/kittens.cuh" in str(err.value)


def test_found_thunderkittens_without_hopper_gpu_says_so(monkeypatch, tmp_path):
    (tmp_path / "include").mkdir()
    (tmp_path / "include" / "kittens.cuh").write_text("// stand-in header\n")
    monkeypatch.setenv("THUNDERKITTENS_ROOT", str(tmp_path))
    assert build.tk_root() == tmp_path.resolve()
    if torch.cuda.is_available() and torch.cuda.get_device_capability() == (9, 0):
        pytest.skip("an sm_90 GPU is present")
    with pytest.raises(build.ThunderKittensUnavailable, match="sm_90"):
        build.extension()
    assert not build.available()


def test_build_flags_target_sm90a_only():
    flags = build.nvcc_flags(Path("/opt/tk"))
    assert "-std=c++20" in flags and "-DKITTENS_HOPPER" in flags
    i = flags.index("-gencode")
    assert flags[i + 1] == "arch=compute_90a,code=sm_90a"
    # No plain sm_90 pass (it rejects wgmma / setmaxnreg), no second target.
    assert flags.count("-gencode") == 1 and not any("sm_90," in f or f.endswith("sm_90")
                                                    for f in flags)
    assert "-I/opt/tk/include" in flags
    assert "--expt-relaxed-constexpr" in flags and "--expt-extended-lambda" in flags
    assert all((build.SRC_DIR / s).is_file() for s in build.SOURCES)
    assert "-lcuda" not in build.ld_flags()  # the driver is found at run time (driver_shim.cpp)


def test_cache_folder_follows_torch_extensions_dir(monkeypatch, tmp_path):
    monkeypatch.setenv("TORCH_EXTENSIONS_DIR", str(tmp_path))
    assert build.cache_dir() is None  # torch then builds under $TORCH_EXTENSIONS_DIR
    monkeypatch.delenv("TORCH_EXTENSIONS_DIR")
    monkeypatch.setenv("HOME", str(tmp_path))
    path = build.cache_dir()
    assert path is not None and path.is_dir()
    assert path.relative_to(tmp_path).parts[:3] == (".cache", "titankit", "tk")


def test_fake_implementations_give_output_shapes():
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        q = torch.empty(2, 100, 8, 128, dtype=torch.bfloat16)
        k = torch.empty(2, 100, 2, 128, dtype=torch.bfloat16)
        out, lse = torch.ops.titankit.tk_attn_fwd(q, k, k, True)
        assert out.shape == q.shape and out.dtype == torch.bfloat16
        assert lse.shape == (2, 8, 100) and lse.dtype == torch.float32
        dq, dk, dv = torch.ops.titankit.tk_attn_bwd(q, q, k, k, q, lse, True, None)
        assert dq.shape == q.shape and dk.shape == k.shape and dv.shape == k.shape
        a = torch.empty(300, 128, dtype=torch.float8_e4m3fn)
        b = torch.empty(64, 128, dtype=torch.float8_e4m3fn)
        s = torch.empty(1, dtype=torch.float32)
        c = torch.ops.titankit.tk_fp8_gemm_rowwise(a, b, s, s)
        assert c.shape == (300, 64) and c.dtype == torch.bfloat16


def _rand(*shape, dtype=torch.bfloat16):
    return torch.randn(*shape).to(dtype)


def test_attention_inputs_it_cannot_handle_raise_value_errors():
    q, k = _rand(1, 64, 4, 128), _rand(1, 64, 2, 128)
    with pytest.raises(ValueError, match="document masks"):
        ops.attention(q, k, k, causal=True, doc_ids=torch.zeros(1, 64, dtype=torch.int32))
    with pytest.raises(ValueError, match="head dim 96"):
        ops.attention_fwd(_rand(1, 64, 4, 96), _rand(1, 64, 2, 96), _rand(1, 64, 2, 96),
                          causal=False)
    with pytest.raises(ValueError, match="Sq == Skv"):
        ops.attention_fwd(q[:, :32], k, k, causal=True)
    with pytest.raises(ValueError, match="bfloat16 CUDA tensor, got torch.float32 on cpu"):
        ops.attention_fwd(q.float(), k.float(), k.float(), causal=True)
    with pytest.raises(ValueError, match="CUDA"):
        ops.attention_fwd(q, k, k, causal=True)


def test_fp8_gemm_shapes_it_cannot_handle_raise_value_errors():
    e4m3 = torch.float8_e4m3fn
    s = torch.ones(1)
    with pytest.raises(ValueError, match="multiple of 128"):
        ops.fp8_gemm_rowwise(_rand(64, 96, dtype=e4m3), _rand(64, 96, dtype=e4m3), s, s)
    with pytest.raises(ValueError, match="N of 64"):
        ops.fp8_gemm_rowwise(_rand(64, 128, dtype=e4m3), _rand(96, 128, dtype=e4m3), s, s)
    with pytest.raises(ValueError, match="a \\(M, K\\) and b \\(N, K\\)"):
        ops.fp8_gemm_rowwise(_rand(64, 128, dtype=e4m3), _rand(64, 256, dtype=e4m3), s, s)
    with pytest.raises(ValueError, match="float8_e4m3fn"):
        ops.fp8_gemm_rowwise(_rand(64, 128), _rand(64, 128), s, s)


def test_deterministic_fill_is_off_only_while_the_ops_allocate():
    """The ops allocate their outputs and workspaces with deterministic mode's NaN fill off (their
    kernels write them whole; tests/gpu checks that on a GPU); the user's setting is back after,
    also when the block raises."""
    flag = torch.utils.deterministic
    before = flag.fill_uninitialized_memory
    try:
        for setting in (True, False):
            flag.fill_uninitialized_memory = setting
            with ops._unfilled():
                assert flag.fill_uninitialized_memory is False
            assert flag.fill_uninitialized_memory is setting
            with pytest.raises(RuntimeError, match="boom"), ops._unfilled():
                raise RuntimeError("boom")
            assert flag.fill_uninitialized_memory is setting
    finally:
        flag.fill_uninitialized_memory = before


def _tk_include() -> Path | None:
    for root in (os.environ.get("THUNDERKITTENS_ROOT"), REPO / ".tk"):
        if root and (Path(root) / "include" / "kittens.cuh").is_file():
            return Path(root)
    return None


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nvcc") is None, reason="needs nvcc")
@pytest.mark.skipif(_tk_include() is None, reason="needs a ThunderKittens clone")
@pytest.mark.parametrize("source", [s for s in build.SOURCES if s.endswith(".cu")])
def test_cuda_source_compiles_for_sm90a_without_spills(source, tmp_path):
    """~15-30 s per file on one core: slow, and skipped where nvcc or ThunderKittens is missing."""
    cmd = ["nvcc", *build.nvcc_flags(_tk_include()), "-Xptxas=-v", "-c",
           str(build.SRC_DIR / source), "-o", str(tmp_path / "k.o")]
    res = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    log = res.stdout + res.stderr
    assert "error" not in log.lower()
    frames = re.findall(r"(\d+) bytes stack frame, (\d+) bytes spill stores, (\d+) bytes spill "
                        r"loads", log)
    assert frames, log[-2000:]
    assert all(f == ("0", "0", "0") for f in frames), f"register spills / local memory: {frames}"
    assert "C7512" not in log, "ptxas serialized wgmma (not enough registers)"
    assert "C7508" not in log, "ptxas ignored setmaxnreg"


def test_a_wheel_carries_every_kernel_source():
    """The kernels compile on the user's machine, so pyproject's package-data must list each source
    file beside ops.py; a new .cu or header that no pattern matches would be missing from a wheel."""
    import fnmatch

    try:
        import tomllib
    except ModuleNotFoundError:  # Python 3.10
        import tomli as tomllib
    project = tomllib.loads((REPO / "pyproject.toml").read_text())
    patterns = project["tool"]["setuptools"]["package-data"]["kernels.thunderkittens"]
    sources = [p.name for p in (REPO / "kernels" / "thunderkittens").iterdir()
               if p.is_file() and p.suffix != ".py" and not p.name.startswith(".")]
    assert {".cu", ".cuh", ".cpp", ".h"} <= {Path(n).suffix for n in sources}
    missing = [n for n in sources if not any(fnmatch.fnmatch(n, pat) for pat in patterns)]
    assert not missing, f"not in [tool.setuptools.package-data]: {missing}"
