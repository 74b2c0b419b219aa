"""The Triton RMSNorm (in Triton's CPU interpreter) and the torch backend against the fp32 spec."""

import os

# Triton decides interpreter vs compiled when a kernel is decorated, i.e. when
# kernels.norm.rmsnorm_triton is first imported: set the flag before anything can import it.
os.environ["TRITON_INTERPRET"] = "1"

import importlib  # noqa: E402
import sys  # noqa: E402

import pytest  # noqa: E402
import torch  # noqa: E402

pytest.importorskip("triton")

from kernels.norm import BACKENDS, rms_norm, rms_norm_reference  # noqa: E402
from tests.helpers.cpu import cpu_children

# fp32: accumulation-order noise only. fp16: one rounding of the output (2^-11 relative) plus the
# spec's own rounding, on values of order 1-10.
TOL = {torch.float32: dict(rtol=1e-5, atol=1e-5), torch.float16: dict(rtol=2e-3, atol=2e-3)}
SHAPES = [(1, 1), (3, 17), (2, 5, 129), (7, 1000), (33, 48), (2, 16384)]


@pytest.fixture(scope="module", autouse=True)
def interpreted_kernels():
    """If another test module imported the kernels without the interpreter, re-decorate them."""
    name = "kernels.norm.rmsnorm_triton"
    if name in sys.modules:
        from triton.runtime.interpreter import InterpretedFunction

        if not isinstance(sys.modules[name]._rms_norm_fwd_kernel, InterpretedFunction):
            importlib.reload(sys.modules[name])
    yield


def _inputs(shape, dtype, seed):
    g = torch.Generator().manual_seed(seed)
    # Non-unit scale and an offset so rms != 1 and the normalisation matters.
    x = (torch.randn(shape, generator=g) * 3.0 + 0.5).to(dtype)
    w = (torch.randn(shape[-1], generator=g) * 0.5 + 1.0).to(dtype)
    dy = torch.randn(shape, generator=g).to(dtype)
    return x, w, dy


@pytest.mark.parametrize("dtype", [torch.float32, torch.float16])
@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("backend", BACKENDS)
def test_forward_backward_match_reference(backend, shape, dtype):
    x, w, dy = _inputs(shape, dtype, seed=sum(shape))
    eps = 1e-5
    xk = x.clone().requires_grad_(True)
    wk = w.clone().requires_grad_(True)
    y = rms_norm(xk, wk, eps, backend=backend)
    y.backward(dy)
    # The spec in fp32 on the same (rounded) inputs; gradients by autograd of the spec.
    xr = x.float().requires_grad_(True)
    wr = w.float().requires_grad_(True)
    yr = rms_norm_reference(xr, wr, eps)
    yr.backward(dy.float())
    assert y.dtype == dtype and y.shape == x.shape
    assert xk.grad.dtype == dtype and wk.grad.dtype == dtype
    torch.testing.assert_close(y.float(), yr, **TOL[dtype])
    torch.testing.assert_close(xk.grad.float(), xr.grad, **TOL[dtype])
    # dw sums over all rows: its error grows with the row count, relative to its magnitude.
    torch.testing.assert_close(wk.grad.float(), wr.grad, **TOL[dtype])


def test_fp32_weight_with_fp16_activations():
    x, _, dy = _inputs((4, 33), torch.float16, seed=1)
    w = torch.randn(33, generator=torch.Generator().manual_seed(2)) + 1.0
    xk, wk = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    y = rms_norm(xk, wk, 1e-6, backend="triton")
    y.backward(dy)
    xr, wr = x.float().requires_grad_(True), w.clone().requires_grad_(True)
    yr = rms_norm_reference(xr, wr, 1e-6)
    yr.backward(dy.float())
    assert y.dtype == torch.float16 and wk.grad.dtype == torch.float32
    torch.testing.assert_close(y.float(), yr, **TOL[torch.float16])
    torch.testing.assert_close(xk.grad.float(), xr.grad, **TOL[torch.float16])
    torch.testing.assert_close(wk.grad, wr.grad, **TOL[torch.float16])


def test_non_contiguous_input():
    x, w, _ = _inputs((6, 40), torch.float32, seed=3)
    xt = x.t().contiguous().t()  # same values, column-major strides
    assert not xt.is_contiguous()
    torch.testing.assert_close(rms_norm(xt, w, 1e-5, "triton"), rms_norm_reference(x, w, 1e-5), **TOL[torch.float32])


def test_opcheck():
    x, w, dy = _inputs((3, 24), torch.float32, seed=4)
    torch.library.opcheck(torch.ops.titankit.rms_norm.default, (x.requires_grad_(True), w.requires_grad_(True), 1e-5))
    torch.library.opcheck(torch.ops.titankit.rms_norm_backward.default, (dy, x.detach(), w.detach(), 1e-5))


def test_under_torch_compile():
    """The op is an opaque node for torch.compile (aot_eager: fake + autograd registration, no codegen)."""
    x, w, dy = _inputs((2, 3, 20), torch.float32, seed=5)

    def f(x, w):
        return rms_norm(x * 2.0, w, 1e-5, backend="triton") + 1.0

    compiled = torch.compile(f, backend="aot_eager", fullgraph=True)
    xc, wc = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    xe, we = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
    yc, ye = compiled(xc, wc), f(xe, we)
    yc.backward(dy)
    ye.backward(dy)
    torch.testing.assert_close(yc, ye, rtol=0, atol=0)
    torch.testing.assert_close(xc.grad, xe.grad, rtol=0, atol=0)
    torch.testing.assert_close(wc.grad, we.grad, rtol=0, atol=0)


def test_bad_inputs_raise_value_error():
    x = torch.randn(2, 8)
    with pytest.raises(ValueError, match="weight"):
        rms_norm(x, torch.ones(7), 1e-5)
    with pytest.raises(ValueError, match="backend"):
        rms_norm(x, torch.ones(8), 1e-5, backend="cuda")
    with pytest.raises(ValueError, match="16384"):
        rms_norm(torch.randn(1, 16385), torch.ones(16385), 1e-5, backend="triton")


def test_bench_on_cpu_says_so_and_its_rows_run(capsys):
    from kernels.norm import bench

    assert bench.main([]) == 2  # measured nothing: not a success
    assert "CUDA" in capsys.readouterr().out
    # The measuring code itself, on CPU with a wall-clock timer (torch.compile left to the GPU run).
    lines = bench.bench_width(40, 96, torch.float32, 1e-5, ["triton", "torch", "torch_native"], "cpu", bench.wall_ms)
    assert [line.split()[1] for line in lines] == ["triton", "torch", "torch_native"]
    assert all(float(line.split()[-1]) < 1e-5 for line in lines)  # max error vs the spec


def test_llama_with_triton_norm_matches_torch_norm():
    """The model's norms on the Triton op give the same logits and gradients as on the torch backend."""
    from trainer.models import FAMILIES

    family = FAMILIES["llama3"]
    results = []
    for backend in ("torch", "triton"):
        args = family.make_args("debug", {"n_layers": 2, "norm_backend": backend})
        torch.manual_seed(0)
        model = family.model_cls(args)
        model.init_weights()
        gen = torch.Generator().manual_seed(1)
        tokens = torch.randint(0, args.vocab_size, (2, 12), generator=gen)
        logits = model(tokens)
        (logits * torch.randn(logits.shape, generator=gen)).sum().backward()
        results.append((logits, {n: p.grad for n, p in model.named_parameters()}))
    (l_torch, g_torch), (l_triton, g_triton) = results
    torch.testing.assert_close(l_triton, l_torch, **TOL[torch.float32])
    for name, grad in g_torch.items():
        torch.testing.assert_close(g_triton[name], grad, rtol=1e-4, atol=1e-5, msg=name)


def _dtensor_worker(rank: int, world: int, store_file: str) -> None:
    import torch.distributed as dist
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor, init_device_mesh

    # A file rendezvous: no TCP port to pick (and possibly lose to another process).
    dist.init_process_group("gloo", init_method=f"file://{store_file}", rank=rank, world_size=world)
    try:
        mesh = init_device_mesh("cpu", (world,))
        x, w, dy = _inputs((2, 6, 40), torch.float32, seed=9)  # same full tensors on every rank
        # Sequence parallel layout: rows split over ranks on the sequence dim, weight replicated.
        xd = distribute_tensor(x, mesh, [Shard(1)]).requires_grad_(True)
        wd = distribute_tensor(w, mesh, [Replicate()]).requires_grad_(True)
        y = rms_norm(xd, wd, 1e-5, backend="triton")
        assert y.placements == (Shard(1),)
        y.backward(distribute_tensor(dy, mesh, [Shard(1)]))
        xr, wr = x.clone().requires_grad_(True), w.clone().requires_grad_(True)
        rms_norm_reference(xr, wr, 1e-5).backward(dy)
        torch.testing.assert_close(y.full_tensor(), rms_norm_reference(x, w, 1e-5), **TOL[torch.float32])
        torch.testing.assert_close(xd.grad.full_tensor(), xr.grad, **TOL[torch.float32])
        # Each rank's dw covers its rows only; the DTensor rule makes it a sum over ranks.
        torch.testing.assert_close(wd.grad.full_tensor(), wr.grad, **TOL[torch.float32])
        dist.barrier()  # no rank tears gloo down while the other is still in the last collective
    finally:
        dist.destroy_process_group()
    # Leave without the interpreter's teardown: in 2 of 5 runs of tests/kernels on 2 CPU cores, a
    # gloo thread still being destroyed there aborted rank 1 ("terminate called without an active
    # exception") after every check had passed. A failed check raised above and reaches mp.spawn.
    os._exit(0)


def test_triton_op_under_sequence_parallel_dtensor(tmp_path):
    """2 gloo ranks: the op takes sequence-sharded DTensors and dw is reduced across ranks."""
    import torch.multiprocessing as mp

    with cpu_children():
        mp.spawn(_dtensor_worker, args=(2, str(tmp_path / "store")), nprocs=2, join=True)
