"""Build of titankit's ThunderKittens extension: JIT through torch.utils.cpp_extension, cached.

ThunderKittens (https://github.com/HazyResearch/ThunderKittens, MIT, header-only) is never vendored:
the user clones it and points THUNDERKITTENS_ROOT at the clone (headers in $ROOT/include). The first
call of `extension()` compiles the sources below for sm_90a (a few minutes on one core, files in
parallel when ninja has cores) into a cache folder: $TORCH_EXTENSIONS_DIR when set, else
~/.cache/titankit/tk. Later calls, also from other processes, load the cached library; torch
rebuilds it when a source, a flag or the ThunderKittens path changes.
"""

from __future__ import annotations

import functools
import os
from pathlib import Path
from types import ModuleType

import torch

SRC_DIR = Path(__file__).resolve().parent
SOURCES = (
    "binding.cpp",
    "driver_shim.cpp",
    "gemm_fp8_rowwise_sm90.cu",
    "attention_fwd_sm90.cu",
    "attention_bwd_sm90.cu",
)
EXTENSION_NAME = "titankit_tk_C"
INSTALL_HINT = (
    "ThunderKittens not found: git clone https://github.com/HazyResearch/ThunderKittens and set "
    "THUNDERKITTENS_ROOT=<clone>"
)

# The flags of ThunderKittens' own Makefiles (kernels/common.mk, GPU=H100): C++20, Hopper features
# on, the sm_90a target only (wgmma and setmaxnreg exist only there; a plain sm_90 pass would reject
# them), fast math, and torch's headers' warning 3189 silenced. Naming an arch here also stops
# torch from adding its own -gencode flags.
NVCC_FLAGS = [
    "-std=c++20",
    "-O3",
    "-DNDEBUG",
    "-DKITTENS_HOPPER",
    "-gencode",
    "arch=compute_90a,code=sm_90a",
    "--expt-relaxed-constexpr",
    "--expt-extended-lambda",
    "--use_fast_math",
    "-Xcompiler=-fno-strict-aliasing",
    "-diag-suppress=3189",
]
CXX_FLAGS = ["-O2"]


class ThunderKittensUnavailable(RuntimeError):
    """ThunderKittens, nvcc or an sm_90 GPU is missing; the message says which and what to do."""


def tk_root(root: str | None = None) -> Path:
    """The ThunderKittens clone: `root`, else $THUNDERKITTENS_ROOT; checks include/kittens.cuh."""
    value = root if root is not None else os.environ.get("THUNDERKITTENS_ROOT")
    if not value:
        raise ThunderKittensUnavailable(f"{INSTALL_HINT} (THUNDERKITTENS_ROOT is not set)")
    path = Path(value).expanduser().resolve()
    if not (path / "include" / "kittens.cuh").is_file():
        raise ThunderKittensUnavailable(
            f"{INSTALL_HINT} (THUNDERKITTENS_ROOT={value} has no include/kittens.cuh)"
        )
    return path


def nvcc_flags(root: Path) -> list[str]:
    """Every nvcc flag of the build for a given ThunderKittens clone."""
    return [*NVCC_FLAGS, f"-I{root / 'include'}", f"-I{SRC_DIR}"]


def ld_flags() -> list[str]:
    """libdl for driver_shim.cpp (it finds the CUDA driver at run time, so no -lcuda), and an rpath
    to the toolkit's libcudart, which torch links but which its wheel may not ship (a cu12 torch
    with a CUDA 13 toolkit)."""
    from torch.utils.cpp_extension import CUDA_HOME

    flags = ["-ldl"]
    if CUDA_HOME:
        flags.append(f"-Wl,-rpath,{Path(CUDA_HOME) / 'lib64'}")
    return flags


def cache_dir() -> Path | None:
    """Build folder; None lets torch use $TORCH_EXTENSIONS_DIR."""
    if os.environ.get("TORCH_EXTENSIONS_DIR"):
        return None
    # One folder per torch build: its headers and libraries are part of what gets compiled in.
    path = Path.home() / ".cache" / "titankit" / "tk" / f"torch-{torch.__version__}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def require_sm90(device: torch.device | None = None) -> None:
    """Raise ThunderKittensUnavailable unless `device` (default: current) is a Hopper GPU."""
    if not torch.cuda.is_available():
        raise ThunderKittensUnavailable(
            "ThunderKittens kernels need an sm_90 (Hopper: H100/H200) GPU; no CUDA device is "
            "visible"
        )
    major, minor = torch.cuda.get_device_capability(device)
    if (major, minor) != (9, 0):
        name = torch.cuda.get_device_name(device)
        raise ThunderKittensUnavailable(
            f"ThunderKittens kernels need an sm_90 (Hopper: H100/H200) GPU; {name} is "
            f"sm_{major}{minor}"
        )


@functools.lru_cache(maxsize=None)
def _load(root: str, verbose: bool) -> ModuleType:
    from torch.utils import cpp_extension

    if cpp_extension.CUDA_HOME is None or not cpp_extension.is_ninja_available():
        raise ThunderKittensUnavailable(
            "building the ThunderKittens kernels needs the CUDA toolkit (nvcc >= 12.8; set "
            "CUDA_HOME) and ninja (pip install ninja)"
        )
    directory = cache_dir()
    return cpp_extension.load(
        name=EXTENSION_NAME,
        sources=[str(SRC_DIR / s) for s in SOURCES],
        extra_cflags=CXX_FLAGS,
        extra_cuda_cflags=nvcc_flags(Path(root)),
        extra_ldflags=ld_flags(),
        build_directory=None if directory is None else str(directory),
        verbose=verbose,
    )


_EXTENSION: ModuleType | None = None


def extension(verbose: bool = False) -> ModuleType:
    """The compiled extension (built on first use); raises ThunderKittensUnavailable when it cannot
    run here: no ThunderKittens, no sm_90 GPU, or no CUDA toolkit. After the first success this is
    a global lookup (it runs on every kernel call)."""
    global _EXTENSION
    if _EXTENSION is None:
        root = tk_root()
        require_sm90()
        _EXTENSION = _load(str(root), verbose or bool(os.environ.get("TITANKIT_TK_VERBOSE")))
    return _EXTENSION


def available() -> bool:
    """Whether `extension()` can be attempted here (TK found and an sm_90 GPU visible)."""
    try:
        tk_root()
        require_sm90()
    except ThunderKittensUnavailable:
        return False
    return True


def unavailable_reason() -> str | None:
    """None when the kernels can run here (building the extension if needed), else the one-line
    reason they cannot: what benchmarks print when they leave the ThunderKittens rows out."""
    if not os.environ.get("THUNDERKITTENS_ROOT"):
        return "THUNDERKITTENS_ROOT is not set"
    try:
        extension()
    except ThunderKittensUnavailable as e:
        return str(e).splitlines()[0]
    except (RuntimeError, OSError, ImportError) as e:  # nvcc or the linker failed: say so, once
        return f"the extension did not build: {str(e).splitlines()[0][:160]}"
    return None


def main() -> int:
    """`python -m kernels.thunderkittens.build`: build (or load) the extension, print where."""
    import time

    start = time.perf_counter()
    try:
        ext = extension(verbose=True)
    except ThunderKittensUnavailable as e:
        print(e)
        return 1
    print(f"ThunderKittens extension ready in {time.perf_counter() - start:.0f} s: {ext.__file__}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
