"""Triton FP8 (e4m3) scaled GEMM for Hopper: C (M, N) = (A * scale_a) @ (B * scale_b), bf16/fp32 out.

Same contract as `torch._scaled_mm`: A (M, K) row-major, B (K, N) column-major (pass `w.t()` of a
row-major (N, K) weight), K and N multiples of 16, fp32 dequantizing scales that are either rowwise
(scale_a (M, 1), scale_b (1, N)) or tensorwise (one element each).

Kernel: persistent (one program per SM walks the output tiles with stride NUM_SMS), grouped tile
order (GROUP_M row blocks share the same B column blocks while they are in L2), TMA loads of A and B
through host-side tensor descriptors (triton.tools.tensor_descriptor, triton >= 3.4; the descriptors
zero-pad edge tiles, so M need not be a multiple of the block), fp32 accumulation, scales applied once
in the epilogue, TMA store of C (optionally in two halves to free shared memory for a deeper pipeline).

Accumulation: Hopper's FP8 wgmma accumulates in reduced precision. use_fast_accum=False promotes
the partial sums into the fp32 accumulator after every 128 elements of K (or BLOCK_K if smaller), as
DeepSeek-V3 does (arXiv 2412.19437, sec. 3.3.2), through Triton's `max_num_imprecise_acc`, which
promotes inside one tl.dot too when BLOCK_K = 256 (fewer loop iterations); use_fast_accum=True
keeps Triton's sm90 default (no promotion), like `torch._scaled_mm(use_fast_accum=True)`.
"""

from __future__ import annotations

import functools

import torch
import triton
import triton.language as tl
from triton.tools.tensor_descriptor import TensorDescriptor

from kernels.fp8.quantize_e4m3 import INTERPRET
from kernels.fp8.reference import E4M3

_OUT_DTYPES = (torch.bfloat16, torch.float32)


@triton.jit
def _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M: tl.constexpr):
    """Grouped order: walk GROUP_M row blocks down a column of tiles before moving right."""
    group_tiles = GROUP_M * num_pid_n
    first_m = (tile_id // group_tiles) * GROUP_M
    rows_in_group = tl.minimum(num_pid_m - first_m, GROUP_M)
    pid_m = first_m + (tile_id % group_tiles) % rows_in_group
    pid_n = (tile_id % group_tiles) // rows_in_group
    return pid_m, pid_n


@triton.jit
def _fp8_gemm_kernel(a_desc, b_desc, c_desc, scale_a_ptr, scale_b_ptr, M, N, K,
                     ROWWISE: tl.constexpr, FAST_ACCUM: tl.constexpr, OUT_BF16: tl.constexpr,
                     NUM_SMS: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                     BLOCK_K: tl.constexpr, GROUP_M: tl.constexpr, EPILOGUE_SPLIT: tl.constexpr):
    start = tl.program_id(0)
    num_pid_m = tl.cdiv(M, BLOCK_M)
    num_pid_n = tl.cdiv(N, BLOCK_N)
    k_tiles = tl.cdiv(K, BLOCK_K)
    num_tiles = num_pid_m * num_pid_n
    if not ROWWISE:
        s_ab = tl.load(scale_a_ptr) * tl.load(scale_b_ptr)
    # A second tile counter for the epilogue, as Triton's persistent-matmul tutorial does: a value
    # used both in the pipelined prologue and in the epilogue trips the software pipeliner.
    tile_c = start - NUM_SMS
    for tile_id in tl.range(start, num_tiles, NUM_SMS, flatten=True):
        pid_m, pid_n = _tile_coords(tile_id, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        acc = tl.zeros((BLOCK_M, BLOCK_N), dtype=tl.float32)
        for ki in range(k_tiles):
            a = a_desc.load([off_m, ki * BLOCK_K])  # (BLOCK_M, BLOCK_K) e4m3
            b = b_desc.load([off_n, ki * BLOCK_K])  # (BLOCK_N, BLOCK_K) e4m3: K-major, as wgmma wants
            if FAST_ACCUM:
                acc = tl.dot(a, b.T, acc)
            else:
                # A promotion interval above BLOCK_K would never promote: cap it at BLOCK_K.
                acc = tl.dot(a, b.T, acc, max_num_imprecise_acc=128 if BLOCK_K >= 128 else BLOCK_K)

        tile_c += NUM_SMS
        pid_m, pid_n = _tile_coords(tile_c, num_pid_m, num_pid_n, GROUP_M)
        off_m = pid_m * BLOCK_M
        off_n = pid_n * BLOCK_N
        if ROWWISE:
            offs_m = off_m + tl.arange(0, BLOCK_M)
            offs_n = off_n + tl.arange(0, BLOCK_N)
            s_a = tl.load(scale_a_ptr + offs_m, mask=offs_m < M, other=0.0)
            s_b = tl.load(scale_b_ptr + offs_n, mask=offs_n < N, other=0.0)
            acc = acc * s_a[:, None] * s_b[None, :]
        else:
            acc = acc * s_ab
        if OUT_BF16:
            c = acc.to(tl.bfloat16)
        else:
            c = acc
        if EPILOGUE_SPLIT:
            c0, c1 = tl.split(tl.permute(tl.reshape(c, (BLOCK_M, 2, BLOCK_N // 2)), (0, 2, 1)))
            c_desc.store([off_m, off_n], c0)
            c_desc.store([off_m, off_n + BLOCK_N // 2], c1)
        else:
            c_desc.store([off_m, off_n], c)


def _set_block_shapes(nargs: dict) -> None:
    """Autotune pre-hook: the host descriptors' block shapes must match the config being tried."""
    bm, bn, bk = nargs["BLOCK_M"], nargs["BLOCK_N"], nargs["BLOCK_K"]
    nargs["a_desc"].block_shape = [bm, bk]
    nargs["b_desc"].block_shape = [bn, bk]
    nargs["c_desc"].block_shape = [bm, bn // 2 if nargs["EPILOGUE_SPLIT"] else bn]


def _config(bm: int, bn: int, split: bool, stages: int, warps: int = 8, bk: int = 128) -> triton.Config:
    kw = dict(BLOCK_M=bm, BLOCK_N=bn, BLOCK_K=bk, GROUP_M=8, EPILOGUE_SPLIT=split)
    return triton.Config(kw, num_warps=warps, num_stages=stages, pre_hook=_set_block_shapes)


# Shared memory per stage is (bm + bn) * 128 bytes plus the C staging tile (halved by the split
# epilogue); 227 KiB per SM on sm_90.
# Fast accumulation (one fp32 accumulator; a 128x256 tile on 8 warps holds 128 registers of it per
# thread): 128x256 / 256x128 for the big GEMMs, smaller tiles for the small-N shapes (8B wk/wv:
# N = 1024 gives 256 tiles of 128x256 on 132 SMs, 1.94 waves; 128x128 gives 512 tiles, 3.9 waves).
FAST_CONFIGS = [  # the first four were the whole set of the first H200 run
    _config(128, 256, True, 4),
    _config(128, 256, False, 3),
    _config(256, 128, True, 3),
    _config(128, 128, False, 4),
    _config(128, 128, True, 5),
]
# fp32 promotion (max_num_imprecise_acc) keeps a second, partial accumulator of the tile's size in
# registers: a 128x256 tile on 2 warpgroups then needs 2 x 128 accumulator registers per thread,
# which likely spills (the first H200 run measured ~1,040 TFLOP/s promoted vs ~1,320 fast at 8192^3,
# docs/perf/2026-11-30_h200_fp8_gemm.txt). Tiles of 64 x 128 per warpgroup fit twice; BLOCK_K 256
# halves the loop iterations (barrier waits, TMA issue) per promotion. Few configs on purpose: every
# config is compiled once per (rowwise, accumulation, output dtype) variant.
PROMO_CONFIGS = [
    _config(128, 128, False, 4),
    _config(128, 128, True, 5),
    _config(64, 256, True, 4),
    _config(128, 128, True, 3, bk=256),
]
CONFIGS = FAST_CONFIGS + [c for c in PROMO_CONFIGS if c not in FAST_CONFIGS]


def _prune(configs: list, named_args: dict, **kwargs) -> list:
    """Autotune only the configs made for this accumulation mode (FAST_ACCUM is a launch kwarg)."""
    wanted = FAST_CONFIGS if kwargs["FAST_ACCUM"] else PROMO_CONFIGS
    return [c for c in configs if c in wanted]


def _autotune_bench(kernel_call, quantiles):
    """Time one config: 10 + 40 ms instead of triton's default 25 + 100 ms, which is plenty to rank
    configs apart by more than a few percent and keeps the first training step's tuning short."""
    import triton.testing

    return triton.testing.do_bench(kernel_call, warmup=10, rep=40, quantiles=quantiles)


_fp8_gemm_tuned = triton.autotune(
    configs=CONFIGS, key=["M", "N", "K", "ROWWISE", "FAST_ACCUM", "OUT_BF16"],
    prune_configs_by={"early_config_prune": _prune}, do_bench=_autotune_bench,
)(_fp8_gemm_kernel)

# The interpreter runs one fixed small config (autotuning there would only time numpy); tests may
# override it to cover the split epilogue and the persistent loop.
INTERPRETER_CONFIG = dict(BLOCK_M=32, BLOCK_N=32, BLOCK_K=32, GROUP_M=2, EPILOGUE_SPLIT=False, NUM_SMS=3)


@functools.lru_cache(maxsize=None)
def _device_info(device_index: int) -> tuple[int, tuple[int, int]]:
    """(SM count, compute capability), queried once per device (host time counts for small GEMMs)."""
    props = torch.cuda.get_device_properties(device_index)
    return props.multi_processor_count, (props.major, props.minor)


def check_gemm_args(a, b, scale_a, scale_b, out_dtype) -> bool:
    """Validate the _scaled_mm-style arguments; returns True for rowwise, False for tensorwise."""
    where = "titankit::fp8_gemm"
    if a.dtype != E4M3 or b.dtype != E4M3:
        raise ValueError(f"{where}: a and b must be float8_e4m3fn, got {a.dtype} and {b.dtype}")
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[0]:
        raise ValueError(f"{where}: shapes {tuple(a.shape)} @ {tuple(b.shape)} do not multiply")
    M, K = a.shape
    N = b.shape[1]
    if K % 16 or N % 16:
        raise ValueError(f"{where}: K={K} and N={N} must be multiples of 16 (TMA needs 16-byte rows)")
    if not a.is_contiguous() or not b.t().is_contiguous():
        raise ValueError(f"{where}: a must be row-major (M, K) and b column-major (K, N) "
                         "(pass w.t() of a row-major (N, K) weight), as for torch._scaled_mm")
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{where}: out_dtype {out_dtype} is not one of {_OUT_DTYPES}")
    for s, name in ((scale_a, "scale_a"), (scale_b, "scale_b")):
        if s.dtype != torch.float32:
            raise ValueError(f"{where}: {name} must be float32, got {s.dtype}")
    if tuple(scale_a.shape) == (M, 1) and tuple(scale_b.shape) == (1, N):
        return True
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return False
    raise ValueError(f"{where}: scales must be rowwise (scale_a ({M}, 1), scale_b (1, {N})) or "
                     f"tensorwise (one element each), got {tuple(scale_a.shape)} and {tuple(scale_b.shape)}")


def fp8_gemm_launch(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=False,
                    config: dict | None = None) -> torch.Tensor:
    """Launch the kernel without the custom-op wrapper (eager callers skip the dispatcher's ~10-25 us
    per call). `config` forces one config: the keys of INTERPRETER_CONFIG, optionally num_warps and
    num_stages (interpreter, tests)."""
    rowwise = check_gemm_args(a, b, scale_a, scale_b, out_dtype)
    num_sms = 0
    if a.is_cuda:
        num_sms, capability = _device_info(a.device.index if a.device.index is not None
                                           else torch.cuda.current_device())
        if capability < (9, 0):
            raise ValueError("titankit::fp8_gemm needs a Hopper or newer GPU (sm_90+: TMA and FP8 "
                             "wgmma); use float8.backend = 'torch' on this device")
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    scale_a = scale_a.contiguous().float()
    scale_b = scale_b.contiguous().float()
    bt = b.t()  # (N, K) contiguous: the K-major B operand
    if config is None and not INTERPRET:
        # Placeholder block shapes; the autotune pre-hook sets the real ones per config.
        a_desc = TensorDescriptor.from_tensor(a, [128, 128])
        b_desc = TensorDescriptor.from_tensor(bt, [128, 128])
        c_desc = TensorDescriptor.from_tensor(c, [128, 128])

        def grid(meta):
            tiles = triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])
            return (min(num_sms, tiles),)

        _fp8_gemm_tuned[grid](
            a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K, ROWWISE=rowwise,
            FAST_ACCUM=use_fast_accum, OUT_BF16=out_dtype == torch.bfloat16, NUM_SMS=num_sms,
        )
        return c
    cfg = dict(INTERPRETER_CONFIG if config is None else config)
    bm, bn, bk, split = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["EPILOGUE_SPLIT"]
    num_sms = cfg.pop("NUM_SMS") or num_sms  # NUM_SMS 0: the device's SM count
    if num_sms < 1:
        raise ValueError("titankit::fp8_gemm: config NUM_SMS must be >= 1 off CUDA (0 means the GPU's SMs)")
    a_desc = TensorDescriptor.from_tensor(a, [bm, bk])
    b_desc = TensorDescriptor.from_tensor(bt, [bn, bk])
    c_desc = TensorDescriptor.from_tensor(c, [bm, bn // 2 if split else bn])
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    _fp8_gemm_kernel[(min(num_sms, tiles),)](
        a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K, ROWWISE=rowwise, FAST_ACCUM=use_fast_accum,
        OUT_BF16=out_dtype == torch.bfloat16, NUM_SMS=num_sms, **cfg,
    )
    return c


def gemm_impl(
    a: torch.Tensor,
    b: torch.Tensor,
    scale_a: torch.Tensor,
    scale_b: torch.Tensor,
    out_dtype: torch.dtype = torch.bfloat16,
    use_fast_accum: bool = False,
) -> torch.Tensor:
    """(a * scale_a) @ (b * scale_b): the torch._scaled_mm contract (see the module docstring)."""
    return fp8_gemm_launch(a, b, scale_a, scale_b, out_dtype, use_fast_accum)


# The op for torch.compile (fake kernel, no tracing into the launch); eager callers may call
# gemm_impl directly (kernels/fp8/__init__.py does).
fp8_gemm = torch.library.custom_op("titankit::fp8_gemm", mutates_args=())(gemm_impl)


@fp8_gemm.register_fake
def _(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=False):
    check_gemm_args(a, b, scale_a, scale_b, out_dtype)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)
