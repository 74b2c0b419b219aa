"""Probe, not shipped code: FSDP2 with each unit's bf16 all-gather inputs cast once per weight
update instead of at every all-gather.

FSDP2 (torch 2.11-2.13) casts every parameter's fp32 shard to bf16 into a fresh buffer each time
it all-gathers a unit (forward, and again in backward after resharding), although the shards only
change at the optimizer step. With TITANKIT_PROBE_CAST_CACHE=1 in the environment this module
(found first on PYTHONPATH, so Python imports it at start-up) wraps FSDP2's private
`_get_param_all_gather_inputs`: a unit's cast buffers are kept and reused while every shard's
storage is unchanged and no optimizer has stepped since the cast (a global optimizer step hook
clears the cache). Version counters cannot serve here: on torch 2.13 an AdamW step moves neither the
DTensor parameter's counter nor its local shard's (checked on CPU; a first version keyed on them
reused stale casts and trained on frozen weights). Enough for a benchmark, which loads no
checkpoint and edits no weight outside the optimizer; a shipped version would need more. It only measures what the casts cost;
whether titankit should do this, and how, is decided from the numbers.
"""
import importlib.machinery
import importlib.util
import os
import sys

STATS = {"hit": 0, "miss": 0}


def _install() -> None:
    import torch
    from torch.distributed.fsdp._fully_shard import _fsdp_collectives as coll
    from torch.distributed.fsdp._fully_shard._fsdp_param import FSDPParam, ShardedState
    from torch.optim.optimizer import register_optimizer_step_post_hook

    # ("unit", id of its first parameter) or ("param", id) -> (key, cast inputs); emptied after
    # every optimizer step
    cache: dict[tuple, tuple[object, list]] = {}
    register_optimizer_step_post_hook(lambda *_: cache.clear())

    def cacheable(fp) -> bool:
        return (fp.param_dtype is not None and not fp.offload_to_cpu
                and fp.sharded_state == ShardedState.SHARDED
                and not hasattr(fp._sharded_local_tensor, "fsdp_pre_all_gather"))

    def memo(owner: tuple, key: object, cast):
        hit = cache.get(owner)
        if hit is not None and hit[0] == key:
            STATS["hit"] += 1
            return hit[1]
        STATS["miss"] += 1
        cache[owner] = (key, cast())
        return cache[owner][1]

    # Several ranks: the all-gather's inputs of a unit, one cast buffer per parameter.
    original = coll._get_param_all_gather_inputs

    @torch.no_grad()
    def cached(fsdp_params):
        if not fsdp_params or not all(cacheable(fp) for fp in fsdp_params):
            return original(fsdp_params)
        key = tuple((id(fp), fp._sharded_param_data.data_ptr()) for fp in fsdp_params)
        inputs = memo(("unit", id(fsdp_params[0])), key, lambda: original(fsdp_params))
        return [list(ts) for ts in inputs]  # fresh outer lists, the cast tensors shared

    coll._get_param_all_gather_inputs = cached

    # One rank: FSDP2 skips the all-gather and copies each parameter's `all_gather_inputs` (the
    # cast) into its unsharded tensor, so the property is cached as well.
    prop = FSDPParam.all_gather_inputs

    def cached_inputs(fp):
        if not cacheable(fp):
            return prop.fget(fp)
        return memo(("param", id(fp)), fp._sharded_param_data.data_ptr(), lambda: prop.fget(fp))

    FSDPParam.all_gather_inputs = property(cached_inputs)
    if os.environ.get("TITANKIT_PROBE_CAST_CACHE_REPORT"):
        # The trainer's processes may leave through os._exit (no atexit): report after every
        # optimizer step instead, on the first 3 steps and then every 10.
        steps = [0]

        def report(*_):
            steps[0] += 1
            if steps[0] <= 3 or steps[0] % 10 == 0:
                print(f"cast cache after step {steps[0]}: {STATS}", file=sys.stderr, flush=True)

        register_optimizer_step_post_hook(report)


def _chain() -> None:
    """Run the sitecustomize this one shadows, if any."""
    here = os.path.dirname(os.path.abspath(__file__))
    rest = [p for p in sys.path if p and os.path.abspath(p) != here]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
if os.environ.get("TITANKIT_PROBE_CAST_CACHE") == "1":
    try:
        _install()
    except Exception:  # a silent fallback would time the unpatched code under the patched name
        import traceback

        traceback.print_exc()
        os._exit(3)
