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

Host path: the first call of a shape autotunes (configs that fit in shared memory only, see
smem_bytes) and records the compiled launcher; later calls launch it directly (see "Host path").
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


# Shared memory: see smem_bytes below; 227 KiB per block on sm_90. With bf16 output every config
# fits; with fp32 output (a twice larger C staging tile) the 128x256 ones and 64x256 do not, and
# configs_for() leaves them out (triton would raise OutOfResources when launching them).
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
CONFIGS = FAST_CONFIGS + [c for c in PROMO_CONFIGS if c not in FAST_CONFIGS]  # Config compares by value

SM90_SMEM_BYTES = 232448
"""Largest dynamic shared memory of one block on sm_90 (H100/H200): 227 KiB."""
_SMEM_SLACK = 2048  # mbarriers of the TMA pipeline and the store (Triton 3.9 uses 24-1056 bytes)


def smem_bytes(config: triton.Config, out_dtype: torch.dtype) -> int:
    """Shared memory (bytes) one program of `config` needs: an upper bound of what Triton allocates,
    checked against Triton's own count for every config above by tests/kernels/test_fp8.py (an
    sm_90 compile on CPU; e.g. 128x256x128 split, 4 stages: 230,432 bytes with bf16 output, 263,200
    with fp32 output, against 196,608 + 32,768 (+ 2,048) and 196,608 + 65,536 (+ 2,048) here)."""
    k = config.kwargs
    bm, bn, bk, split = k["BLOCK_M"], k["BLOCK_N"], k["BLOCK_K"], k["EPILOGUE_SPLIT"]
    out_bytes = 2 if out_dtype == torch.bfloat16 else 4
    pipeline = config.num_stages * (bm + bn) * bk  # one A (bm, bk) and one B (bn, bk) e4m3 tile per stage
    c_tile = bm * (bn // 2 if split else bn) * out_bytes  # the TMA store's staging tile
    # With the warpgroups side by side along N (BLOCK_M 64 on 8 warps: one 64-row warpgroup per
    # N half), tl.split is a layout conversion through shared memory of the whole tile.
    shuffle = bm * bn * out_bytes if split and bm // 64 < config.num_warps // 4 else 0
    return pipeline + c_tile + shuffle + _SMEM_SLACK


def configs_for(use_fast_accum: bool, out_dtype: torch.dtype, smem_limit: int = SM90_SMEM_BYTES) -> list:
    """The configs the autotuner tries for this accumulation mode and output dtype: those made for
    the mode that fit in `smem_limit` bytes of shared memory."""
    wanted = FAST_CONFIGS if use_fast_accum else PROMO_CONFIGS
    return [c for c in wanted if smem_bytes(c, out_dtype) <= smem_limit]


@functools.lru_cache(maxsize=None)
def _smem_limit(device_index: int) -> int:
    """The limit Triton itself checks before a launch (OutOfResources): max dynamic shared memory."""
    return int(triton.runtime.driver.active.utils.get_device_properties(device_index)["max_shared_mem"])


def _prune(configs: list, named_args: dict, **kwargs) -> list:
    """Autotune only the configs made for this accumulation mode that fit (FAST_ACCUM and OUT_BF16
    are launch kwargs)."""
    out_dtype = torch.bfloat16 if kwargs["OUT_BF16"] else torch.float32
    fit = configs_for(kwargs["FAST_ACCUM"], out_dtype, _smem_limit(torch.cuda.current_device()))
    return [c for c in configs if c in fit]


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


def check_gemm_args(a, b, scale_a, scale_b, out_dtype, check_alignment: bool = True) -> bool:
    """Validate the _scaled_mm-style arguments; returns True for rowwise, False for tensorwise.
    Runs on every call: attribute reads only (~3 us), no device synchronisation. The fake kernel
    passes check_alignment=False (fake tensors have no addresses)."""
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
    if check_alignment and (a.data_ptr() % 16 or b.data_ptr() % 16):
        raise ValueError(f"{where}: a and b must start at 16-byte aligned addresses (TMA); a view at "
                         "an odd offset needs .clone()")
    if out_dtype not in _OUT_DTYPES:
        raise ValueError(f"{where}: out_dtype {out_dtype} is not one of {_OUT_DTYPES}")
    if scale_a.dtype != torch.float32 or scale_b.dtype != torch.float32:
        raise ValueError(f"{where}: scale_a and scale_b must be float32, got {scale_a.dtype} and {scale_b.dtype}")
    if tuple(scale_a.shape) == (M, 1) and tuple(scale_b.shape) == (1, N):
        return True
    if scale_a.numel() == 1 and scale_b.numel() == 1:
        return False
    raise ValueError(f"{where}: scales must be rowwise (scale_a ({M}, 1), scale_b (1, {N})) or "
                     f"tensorwise (one element each), got {tuple(scale_a.shape)} and {tuple(scale_b.shape)}")


# ---------------------------------------------------------------------------------------------
# Host path. A call costs host time that small GEMMs feel (8B wk/wv: ~0.22 ms of GPU time): the
# round-2 H200 bench measured 90.7 us per call through triton's autotuner and JIT dispatch (key
# building, argument specialization of 17 parameters, pre-hook) against 21.9 us for _scaled_mm.
# So the first call of each (M, N, K, scaling, accumulation, output dtype, device, scale alignment)
# goes through the autotuner once and records a _Plan: the compiled kernel's launcher, the grid,
# the constexpr values and three validated TMA descriptors without a tensor. Later calls copy those
# with this call's tensors (0.4 us each instead of 1.3 us for a validating constructor; the driver
# encodes the pointer at launch) and call the launcher directly.
# Why not device-side descriptors (tl.make_tensor_descriptor): they need triton.set_allocator,
# which is a ContextVar (triton/runtime/_allocation.py) and so unset in autograd's backward
# threads, and a scratch allocation per launch costs about what the host encoding does.
# ---------------------------------------------------------------------------------------------

_ARG_NAMES = list(_fp8_gemm_kernel.arg_names)
_RUNTIME_ARGS = ["a_desc", "b_desc", "c_desc", "scale_a_ptr", "scale_b_ptr", "M", "N", "K"]
assert _ARG_NAMES[:8] == _RUNTIME_ARGS, _ARG_NAMES  # the launch below passes them by position


def _with_base(proto: TensorDescriptor, t: torch.Tensor) -> TensorDescriptor:
    """A copy of a validated descriptor for tensor t of the same shape, strides and alignment (the
    key guarantees them), without re-running the dataclass's checks."""
    d = object.__new__(TensorDescriptor)
    d.__dict__.update(proto.__dict__)
    d.base = t
    return d


class _Plan:
    """What a call with a known key needs: run(*args) launches; descs are validated descriptors
    (base None: a plan holds no tensor) with the config's block shapes; consts the constexpr
    values in the kernel's parameter order."""

    __slots__ = ("run", "device", "descs", "consts", "config")

    def __init__(self, run, device: int | None, cfg: dict, config, a, b, c) -> None:
        bm, bn, bk = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"]
        (M, K), N = a.shape, b.shape[1]
        self.run = run
        self.device = device  # CUDA device index of the compiled launcher; None: interpreter
        self.descs = (TensorDescriptor(a, [M, K], [K, 1], [bm, bk]),
                      TensorDescriptor(b, [N, K], [K, 1], [bn, bk]),  # b's storage as (N, K): b.t()
                      TensorDescriptor(c, [M, N], [N, 1], [bm, bn // 2 if cfg["EPILOGUE_SPLIT"] else bn]))
        for d in self.descs:
            d.base = None
        self.consts = tuple(cfg[name] for name in _ARG_NAMES[8:])
        self.config = config  # the triton.Config chosen (None in the interpreter)


_PLANS: dict[tuple, _Plan] = {}
launch_stats = {"plans_built": 0, "planned_launches": 0}
"""Counters for tests and benches: plans built (each one autotuned once on GPU), planned launches."""


def clear_plans() -> None:
    """Forget the recorded plans (the autotuner keeps its own cache of best configs)."""
    _PLANS.clear()


def _build_plan(a, b, c, scale_a, scale_b, M: int, N: int, K: int, rowwise: bool,
                fast: bool, out_dtype: torch.dtype) -> _Plan | None:
    """First call of a key: launch through the autotuner (GPU) or the fixed interpreter config,
    and return the plan for the next calls (None when the launcher cannot be reused)."""
    launch_stats["plans_built"] += 1
    consts = dict(ROWWISE=rowwise, FAST_ACCUM=fast, OUT_BF16=out_dtype == torch.bfloat16)
    if INTERPRET:
        cfg = dict(INTERPRETER_CONFIG, **consts)
        tiles = triton.cdiv(M, cfg["BLOCK_M"]) * triton.cdiv(N, cfg["BLOCK_N"])
        plan = _Plan(_fp8_gemm_kernel[(min(cfg["NUM_SMS"], tiles),)], None, cfg, None, a, b, c)
        _launch(plan, a, b, c, scale_a, scale_b, M, N, K)
        return plan
    dev = a.get_device()  # == the current device (checked by the caller)
    num_sms, capability = _device_info(dev)
    if capability < (9, 0):
        raise ValueError("titankit::fp8_gemm needs a Hopper or newer GPU (sm_90+: TMA and FP8 "
                         "wgmma); use float8.backend = 'torch' on this device")
    limit = _smem_limit(dev)
    if not configs_for(fast, out_dtype, limit):
        raise ValueError(f"titankit::fp8_gemm: no kernel config fits in this GPU's {limit} bytes of "
                         "shared memory per block (the configs are sized for sm_90's 227 KiB); use "
                         "float8.backend = 'torch'")
    # Placeholder block shapes; the autotune pre-hook sets each config's own.
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [128, 128])
    b_desc = TensorDescriptor(b, [N, K], [K, 1], [128, 128])  # b.t(): the K-major (N, K) operand
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [128, 128])

    def grid(meta):
        return (min(num_sms, triton.cdiv(M, meta["BLOCK_M"]) * triton.cdiv(N, meta["BLOCK_N"])),)

    kernel = _fp8_gemm_tuned[grid](a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K,
                                   NUM_SMS=num_sms, **consts)
    best = _fp8_gemm_tuned.best_config
    if kernel is None or not hasattr(kernel, "run"):  # e.g. an asynchronous-compile mode
        return None
    cfg = dict(best.kwargs, NUM_SMS=num_sms, **consts)
    grid3 = (grid(cfg)[0], 1, 1)
    return _Plan(kernel[grid3], dev, cfg, best, a, b, c)


def _launch(plan: _Plan, a, b, c, scale_a, scale_b, M: int, N: int, K: int) -> None:
    pa, pb, pc = plan.descs
    a_desc, b_desc, c_desc = _with_base(pa, a), _with_base(pb, b), _with_base(pc, c)
    if plan.device is not None:
        stream = triton.runtime.driver.active.get_current_stream(plan.device)
        plan.run(a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K, *plan.consts, stream=stream)
    else:
        plan.run(a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K, *plan.consts)


def fp8_gemm_launch(a, b, scale_a, scale_b, out_dtype=torch.bfloat16, use_fast_accum=False,
                    config: dict | None = None) -> torch.Tensor:
    """Launch the kernel without the custom-op wrapper (eager callers skip the dispatcher's ~10-25 us
    per call). `config` forces one config: the keys of INTERPRETER_CONFIG, optionally num_warps and
    num_stages (interpreter, tests); it bypasses the plans and the autotuner."""
    rowwise = check_gemm_args(a, b, scale_a, scale_b, out_dtype)
    M, K = a.shape
    N = b.shape[1]
    c = torch.empty((M, N), device=a.device, dtype=out_dtype)
    if M == 0 or N == 0:
        return c
    if K == 0:
        return c.zero_()
    scale_a = scale_a.contiguous()
    scale_b = scale_b.contiguous()
    if config is not None:
        return _launch_config(a, b, c, scale_a, scale_b, rowwise, use_fast_accum, config)
    dev = a.get_device()  # -1 on CPU (interpreter)
    if dev >= 0 and dev != torch.cuda.current_device():  # the launcher runs on the current device
        raise ValueError(f"titankit::fp8_gemm: tensors on cuda:{dev} but the current device is "
                         f"cuda:{torch.cuda.current_device()}; call torch.cuda.set_device({dev}) first")
    # Triton specializes pointer arguments on 16-byte alignment, so it is part of the key.
    key = (M, N, K, rowwise, use_fast_accum, out_dtype, dev,
           scale_a.data_ptr() % 16 == 0, scale_b.data_ptr() % 16 == 0)
    plan = _PLANS.get(key)
    if plan is None:
        plan = _build_plan(a, b, c, scale_a, scale_b, M, N, K, rowwise, use_fast_accum, out_dtype)
        if plan is not None:
            _PLANS[key] = plan
        return c
    launch_stats["planned_launches"] += 1
    _launch(plan, a, b, c, scale_a, scale_b, M, N, K)
    return c


def _launch_config(a, b, c, scale_a, scale_b, rowwise: bool, fast: bool, config: dict) -> torch.Tensor:
    """One explicit config (tests): checked against shared memory on GPU, then launched via JIT."""
    M, K = a.shape
    N = b.shape[1]
    cfg = dict(config)
    num_sms = cfg.pop("NUM_SMS")
    if a.is_cuda:
        dev = a.device.index if a.device.index is not None else torch.cuda.current_device()
        sms, capability = _device_info(dev)
        if capability < (9, 0):
            raise ValueError("titankit::fp8_gemm needs a Hopper or newer GPU (sm_90+: TMA and FP8 "
                             "wgmma); use float8.backend = 'torch' on this device")
        num_sms = num_sms or sms  # NUM_SMS 0: the device's SM count
        tc = triton.Config({k: cfg[k] for k in INTERPRETER_CONFIG if k != "NUM_SMS"},
                           num_warps=cfg.get("num_warps", 4), num_stages=cfg.get("num_stages", 3))
        need, limit = smem_bytes(tc, c.dtype), _smem_limit(dev)
        if need > limit:
            raise ValueError(f"titankit::fp8_gemm: config {config} needs ~{need} bytes of shared memory "
                             f"with {c.dtype} output; this GPU has {limit} per block")
    if num_sms < 1:
        raise ValueError("titankit::fp8_gemm: config NUM_SMS must be >= 1 off CUDA (0 means the GPU's SMs)")
    bm, bn, bk, split = cfg["BLOCK_M"], cfg["BLOCK_N"], cfg["BLOCK_K"], cfg["EPILOGUE_SPLIT"]
    a_desc = TensorDescriptor(a, [M, K], [K, 1], [bm, bk])
    b_desc = TensorDescriptor(b, [N, K], [K, 1], [bn, bk])
    c_desc = TensorDescriptor(c, [M, N], [N, 1], [bm, bn // 2 if split else bn])
    tiles = triton.cdiv(M, bm) * triton.cdiv(N, bn)
    _fp8_gemm_kernel[(min(num_sms, tiles),)](
        a_desc, b_desc, c_desc, scale_a, scale_b, M, N, K, ROWWISE=rowwise, FAST_ACCUM=fast,
        OUT_BF16=c.dtype == torch.bfloat16, NUM_SMS=num_sms, **cfg,
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
    check_gemm_args(a, b, scale_a, scale_b, out_dtype, check_alignment=False)
    return a.new_empty((a.shape[0], b.shape[1]), dtype=out_dtype)
