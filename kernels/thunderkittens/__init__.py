"""ThunderKittens kernels for Hopper (sm_90a): attention forward/backward and an FP8 rowwise GEMM.

Enable: `git clone https://github.com/HazyResearch/ThunderKittens`, `export
THUNDERKITTENS_ROOT=<clone>`, then pick `model.attention = "thunderkittens"` or
`float8.backend = "thunderkittens"`. The CUDA sources here are compiled on first use (build.py)
into ~/.cache/titankit/tk (or $TORCH_EXTENSIONS_DIR); ThunderKittens is never copied into titankit.

- ops.py: the custom ops titankit::tk_attn_fwd / tk_attn_bwd / tk_fp8_gemm_rowwise and the
  `kernels.attention` backend functions (attention, attention_fwd, attention_bwd).
- build.py: finding ThunderKittens, the nvcc flags, the cached JIT build, the sm_90 check.
- bench.py: `python -m kernels.thunderkittens.bench`, against cuDNN SDPA, Triton, _scaled_mm.
- gpu_check.sh: build + GPU tests + benchmarks in one run on an H100/H200.
"""

from kernels.thunderkittens.build import ThunderKittensUnavailable, available, extension
from kernels.thunderkittens.ops import (
    attention,
    attention_bwd,
    attention_fwd,
    fp8_gemm_rowwise,
    scaled_mm,
)

__all__ = [
    "ThunderKittensUnavailable",
    "attention",
    "attention_bwd",
    "attention_fwd",
    "available",
    "extension",
    "fp8_gemm_rowwise",
    "scaled_mm",
]
