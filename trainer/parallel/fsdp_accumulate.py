"""Gradient accumulation with a narrow reduce dtype: one pass per unit and micro-batch instead of two.

With a bf16 reduce-scatter and fp32 parameters (`training.mixed_precision_reduce = "bfloat16"`),
FSDP2's `foreach_reduce` casts each unit's whole reduce-scatter output to fp32 (a full extra pass
that writes an fp32 copy), then adds its per-parameter views into the sharded `.grad` that earlier
micro-batches of the step left. When every parameter of the unit already holds such a gradient,
the cast only feeds that add, and `grad += bf16_view` upcasts inside the add kernel: the same fp32
values, bit for bit (the upcast is exact and the sum is computed in fp32 either way), without the
cast kernel and its fp32 buffer. Measured on the 8B bf16 profile (2 x H200, 8 micro-batches), the
cast was the largest of FSDP's own kernels (`direct_copy_kernel`, 115 ms of a 6.16 s step).

So for those calls only, the wrapper that `configure(True)` installs hands `foreach_reduce` the reduce dtype as the parameters'
dtype, which turns its cast into a no-op. The first micro-batch of a step (gradients are None after
`zero_grad(set_to_none=True)`), CPU-offloaded gradients and same-dtype reduces take FSDP2's path
unchanged. This wraps a private torch function: `install()` checks its signature and leaves torch
alone (with a log line) if it has changed; tests/distributed/test_grad_sync.py checks on every
torch CI runs that gradients and losses are bitwise those of FSDP2's own path.
"""

from __future__ import annotations

import functools
import inspect
import logging

logger = logging.getLogger("titankit")

_NEEDED = ("fsdp_params", "orig_dtype", "reduce_dtype")
_enabled = False  # the last configure() call's choice: the wrapper is per process, models are not
fused_calls = 0  # how many reduces took the fused path in this process (read by tests)


def _all_accumulating(fsdp_params, orig_dtype) -> bool:
    for p in fsdp_params:
        grad = p.sharded_param.grad
        if grad is None or getattr(p, "offload_to_cpu", False):
            return False
        local = getattr(grad, "_local_tensor", grad)
        if local.dtype != orig_dtype:
            return False
    return True


def configure(enabled: bool) -> bool:
    """Turn the fused path on or off for the FSDP models built from now on in this process (the
    wrapper is installed once, on first use). Returns whether it is on."""
    global _enabled
    _enabled = enabled and _install()
    return _enabled


def _install() -> bool:
    try:
        from torch.distributed.fsdp._fully_shard import _fsdp_param_group as group_mod
    except ImportError:  # pragma: no cover - FSDP2 moved
        logger.info("FSDP2's param group module is not where expected: fused gradient accumulation off")
        return False
    original = group_mod.foreach_reduce
    if getattr(original, "_titankit_fused", False):
        return True
    sig = inspect.signature(original)
    if not all(name in sig.parameters for name in _NEEDED):
        logger.info("FSDP2's foreach_reduce has a new signature %s: fused gradient accumulation off", sig)
        return False

    @functools.wraps(original)
    def foreach_reduce(*args, **kwargs):
        global fused_calls
        bound = sig.bind(*args, **kwargs)
        orig, reduce = bound.arguments["orig_dtype"], bound.arguments["reduce_dtype"]
        if (_enabled and orig is not None and reduce is not None and reduce != orig
                and _all_accumulating(bound.arguments["fsdp_params"], orig)):
            bound.arguments["orig_dtype"] = reduce
            fused_calls += 1
        return original(*bound.args, **bound.kwargs)

    foreach_reduce._titankit_fused = True
    group_mod.foreach_reduce = foreach_reduce
    return True
