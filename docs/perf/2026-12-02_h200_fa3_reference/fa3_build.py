"""Build FlashAttention-3 (hopper/ of Dao-AILab/flash-attention) for one configuration only, as a
reference point for the ThunderKittens attention bench: bf16, head dim 128, forward and backward,
sm_90a; every other feature (paged KV, split KV, softcap, FP8, fp16, varlen, other head dims, sm80)
compiled out with FA3's own FLASHATTENTION_DISABLE_* switches, so that the build fits one device call.

FA3 is third-party code and never enters git. Layout expected under FA3_ROOT (default .fa3, git-ignored):
  hopper/                  hopper/ of flash-attention at the commit named in README.md, with only the
                           two hdim128 bf16 sm90 files left in instantiations/
  cutlass/include/         include/ of NVIDIA/cutlass at the submodule commit flash-attention pins
`load()` returns once torch.ops.flash_attn_3.fwd/bwd exist. The objects stay in FA3_BUILD (default
/tmp/fa3_build, outside the carried folder), so a second call on the same warm machine only loads.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DISABLED = ["PAGEDKV", "SPLIT", "APPENDKV", "LOCAL", "SOFTCAP", "PACKGQA", "FP16", "FP8", "VARLEN",
            "CLUSTER", "HDIM64", "HDIM96", "HDIM192", "HDIM256", "SM8x"]
# setup.py spells these two with the FLASH_ATTENTION_ prefix
DISABLED_OTHER = ["FLASH_ATTENTION_DISABLE_HDIMDIFF64", "FLASH_ATTENTION_DISABLE_HDIMDIFF192"]


def load(root: str | os.PathLike = ".fa3", verbose: bool = True,
         build: str | os.PathLike = "/tmp/fa3_build"):
    import torch
    from torch.utils import cpp_extension

    root = Path(root).resolve()
    hopper = root / "hopper"
    if not (hopper / "flash_api.cpp").exists() or not (root / "cutlass/include/cute").is_dir():
        raise FileNotFoundError(f"{root}: expected hopper/flash_api.cpp and cutlass/include/cute "
                                "(see this file's docstring and README.md for how to make them)")
    defines = [f"-DFLASHATTENTION_DISABLE_{f}" for f in DISABLED] + [f"-D{d}" for d in DISABLED_OTHER]
    sources = [hopper / "flash_api.cpp", hopper / "flash_prepare_scheduler.cu",
               hopper / "instantiations/flash_fwd_hdim128_bf16_sm90.cu",
               hopper / "instantiations/flash_bwd_hdim128_bf16_sm90.cu"]
    build = Path(build)
    build.mkdir(parents=True, exist_ok=True)
    t0 = time.time()
    cpp_extension.load(
        name="flash_attn_3_h128", sources=[str(s) for s in sources], build_directory=str(build),
        extra_include_paths=[str(hopper), str(root / "cutlass/include")],
        extra_cflags=["-O3", "-std=c++17"] + defines,
        extra_cuda_cflags=["-O3", "-std=c++17", "--use_fast_math", "-lineinfo", "--threads", "4",
                           "-DCUTE_SM90_EXTENDED_MMA_SHAPES_ENABLED", "-DCUTLASS_ENABLE_GDC_FOR_SM90",
                           "-DCUTLASS_DEBUG_TRACE_LEVEL=0", "-DNDEBUG",
                           "-gencode", "arch=compute_90a,code=sm_90a"] + defines,
        is_python_module=False, verbose=verbose)
    print(f"fa3 build/load: {time.time() - t0:.0f} s")
    return torch.ops.flash_attn_3


if __name__ == "__main__":
    load(os.environ.get("FA3_ROOT", ".fa3"), build=os.environ.get("FA3_BUILD", "/tmp/fa3_build"))
