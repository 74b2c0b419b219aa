"""titankit's ThunderKittens kernels as torch custom ops (opaque to torch.compile, FSDP2, DTensor):

    titankit::tk_attn_fwd(q, k, v, causal) -> (out, lse)
    titankit::tk_attn_bwd(dout, q, k, v, out, lse, causal, dlse) -> (dq, dk, dv)
    titankit::tk_fp8_gemm_rowwise(a, b, scale_a, scale_b) -> c

Attention follows the contract of `kernels.attention` (docs/interfaces.md): q (B, Sq, Hq, D), k and
v (B, Skv, Hkv, D), Hq % Hkv == 0, lse (B, Hq, Sq) float32 natural log, scale 1/sqrt(D). These
kernels support bf16, D in {64, 128}, any sequence length, causal with Sq == Skv or full attention
(any Sq, Skv); no document masks. tk_attn_fwd is differentiable (also through lse, which context
parallelism merges). tk_attn_bwd accepts a global out/lse of a larger attention (ring CP). Its dQ
(and dK/dV where CTAs share a KV head) is a sum of fp32 reduce-adds from many CTAs. By default they
land in varying order, so the gradients differ in the last bits from call to call; under
torch.use_deterministic_algorithms the kernel takes the adds of every block in a fixed order
(counters in a small workspace) and the gradients are bitwise reproducible.

The FP8 GEMM computes c (M, N) bf16 = (a (M, K) @ b (N, K)^T) * scale_a * scale_b for e4m3 a, b
(both K-major), scale_a (M, 1) and scale_b (1, N) fp32 (one-element scales are broadcast), with
K % 128 == 0, N % 64 == 0 and any M. It
accumulates in the tensor cores' fp32 accumulators without periodic promotion, i.e. with the
numerics of torch._scaled_mm(..., use_fast_accum=True). Tile counts that are whole waves on up
to 5% fewer CTAs than SMs run on that many; shapes whose second wave would be nearly empty split
the K loop of the last tiles over all SMs (stream-K, a workspace allocated here). Either way the
results stay bitwise reproducible run to run on a given GPU model.

Nothing here builds at import: the extension is compiled on the first call (build.py).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch

from kernels import BackendUnavailable
from kernels.thunderkittens import build

HEAD_DIMS = (64, 128)
_WHERE = "kernels.thunderkittens"


def _dense(t: torch.Tensor) -> torch.Tensor:
    """Contiguous and 16-byte aligned (TMA's rules); a copy only when the input is neither."""
    t = t.contiguous()
    return t if t.data_ptr() % 16 == 0 else t.clone()


def _stream(t: torch.Tensor) -> int:
    return torch.cuda.current_stream(t.device).cuda_stream


@contextlib.contextmanager
def _unfilled() -> Iterator[None]:
    """torch.empty without deterministic mode's fill, for the buffers these kernels write whole.

    Under torch.use_deterministic_algorithms (run.deterministic), torch.utils.deterministic.
    fill_uninitialized_memory (on by default) makes every torch.empty write NaN (integers: their
    maximum), so that a kernel reading memory it never wrote stays deterministic. The kernels here
    write every element of their outputs and initialise their workspaces themselves, so the fill
    only wrote each buffer twice: 1.6% of a deterministic forward+backward at the anchor shape,
    4.5% at 70B-TP8 on an H200 (docs/benchmarks.md 4k). The flag is process-global, so for those
    few allocations another thread's torch.empty would skip the fill too."""
    before = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = False
    try:
        yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = before


def validate_attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool,
                       has_docs: bool = False) -> None:
    """ValueError naming what this backend cannot do (shapes are checked by kernels.attention): a
    BackendUnavailable for what it has no kernel for (device, dtype, head dim, document masks)."""
    where = f"{_WHERE} attention (backend 'thunderkittens')"
    if has_docs:
        raise BackendUnavailable(
            f"{where}: document masks (doc_ids / q_doc, kv_doc) are not supported; use backend "
            "'triton' or 'sdpa', or set data.document_mask = false"
        )
    for name, t in (("q", q), ("k", k), ("v", v)):
        if t.dtype != torch.bfloat16:
            # The device too: a CPU run (float32 by default) must learn that dtype is not its problem.
            raise BackendUnavailable(
                f"{where}: {name} must be a bfloat16 CUDA tensor, got {t.dtype} on {t.device}")
        if t.dim() != 4:
            raise ValueError(f"{where}: {name} must be 4-D (B, S, H, D), got {tuple(t.shape)}")
    if q.shape[-1] not in HEAD_DIMS:
        raise BackendUnavailable(f"{where}: head dim {q.shape[-1]} is not supported; valid: {HEAD_DIMS}")
    if causal and q.shape[1] != k.shape[1]:
        raise ValueError(
            f"{where}: causal attention needs Sq == Skv, got {q.shape[1]} and {k.shape[1]}"
        )
    if not q.is_cuda:
        raise BackendUnavailable(f"{where} needs CUDA tensors, got device {q.device}")


@torch.library.custom_op("titankit::tk_attn_fwd", mutates_args=())
def tk_attn_fwd(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    validate_attention(q, k, v, causal)
    ext = build.extension()
    q, k, v = _dense(q), _dense(k), _dense(v)
    b, sq, hq, _ = q.shape
    with _unfilled():
        out = torch.empty_like(q)
        lse = torch.empty((b, hq, sq), dtype=torch.float32, device=q.device)
    with torch.cuda.device(q.device):
        ext.attn_fwd(q, k, v, out, lse, causal, _stream(q))
    return out, lse


@tk_attn_fwd.register_fake
def _(q, k, v, causal):
    b, sq, hq, _ = q.shape
    return q.new_empty(q.shape), q.new_empty((b, hq, sq), dtype=torch.float32)


@torch.library.custom_op("titankit::tk_attn_bwd", mutates_args=())
def tk_attn_bwd(
    dout: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    out: torch.Tensor,
    lse: torch.Tensor,
    causal: bool,
    dlse: torch.Tensor | None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    validate_attention(q, k, v, causal)
    ext = build.extension()
    dout, q, k, v, out = (_dense(t) for t in (dout, q, k, v, out))
    lse = _dense(lse.float())
    dlse = None if dlse is None else _dense(dlse.float())
    b, sq, hq, _ = q.shape
    sp = ext.attn_bwd_padded_len(sq)
    with _unfilled(), torch.cuda.device(q.device):
        delta = torch.empty((b, hq, sp), dtype=torch.float32, device=q.device)
        lse2 = torch.empty_like(delta)
        # fp32 dQ partial sums, in blocks of the kernel's fragment order; the call initialises them.
        dq_acc = torch.empty((b, hq, sp, q.shape[3]), dtype=torch.float32, device=q.device)
        dq, dk, dv = torch.empty_like(q), torch.empty_like(k), torch.empty_like(v)
        # Deterministic mode: counters that order every dQ block's adds (zeroed there).
        det = torch.are_deterministic_algorithms_enabled()
        locks = (torch.empty(ext.attn_bwd_lock_count(b, sq, hq), dtype=torch.int32,
                             device=q.device) if det else None)
        # Few KV heads: several CTAs share a key block and add fp32 dK/dV partials (zeroed there);
        # in deterministic mode each stores its own slice instead, summed in order afterwards.
        split = ext.attn_bwd_kv_split(b, hq, k.shape[2], k.shape[1])
        slices = split if det else 1
        dkv_acc = None if split == 1 else torch.empty((2, slices * k.shape[0], *k.shape[1:]),
                                                      dtype=torch.float32, device=q.device)
        ext.attn_bwd(dout, q, k, v, out, lse, dlse, delta, lse2, dq_acc, dkv_acc, locks, dq, dk,
                     dv, causal, _stream(q))
    return dq, dk, dv


@tk_attn_bwd.register_fake
def _(dout, q, k, v, out, lse, causal, dlse):
    return q.new_empty(q.shape), k.new_empty(k.shape), v.new_empty(v.shape)


def _setup_context(ctx, inputs, output) -> None:
    q, k, v, causal = inputs
    out, lse = output
    ctx.save_for_backward(q, k, v, out, lse)
    ctx.causal = causal


def _backward(ctx, dout, dlse):
    q, k, v, out, lse = ctx.saved_tensors
    dq, dk, dv = tk_attn_bwd(dout, q, k, v, out, lse, ctx.causal, dlse)
    return dq, dk, dv, None


tk_attn_fwd.register_autograd(_backward, setup_context=_setup_context)


# ---- the kernels.attention backend contract (docs/interfaces.md) ------------------------------

def attention(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool = True,
              doc_ids: torch.Tensor | None = None) -> torch.Tensor:
    """Differentiable attention: out (B, Sq, Hq, D)."""
    validate_attention(q, k, v, causal, has_docs=doc_ids is not None)
    return tk_attn_fwd(q, k, v, causal)[0]


def attention_fwd(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool,
                  q_doc: torch.Tensor | None = None, kv_doc: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """(out (B, Sq, Hq, D), lse (B, Hq, Sq) float32); no autograd graph needed by the caller."""
    validate_attention(q, k, v, causal, has_docs=q_doc is not None or kv_doc is not None)
    return tk_attn_fwd(q, k, v, causal)


def attention_bwd(dout: torch.Tensor, q: torch.Tensor, k: torch.Tensor, v: torch.Tensor,
                  out: torch.Tensor, lse: torch.Tensor, *, causal: bool,
                  q_doc: torch.Tensor | None = None, kv_doc: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(dq, dk, dv) in the input dtype; out and lse may be the global ones (ring attention)."""
    validate_attention(q, k, v, causal, has_docs=q_doc is not None or kv_doc is not None)
    return tk_attn_bwd(dout, q, k, v, out, lse, causal, None)


# ---- FP8 GEMM ----------------------------------------------------------------------------------

def _rowwise_scale(s: torch.Tensor, n: int, name: str) -> torch.Tensor:
    if s.dtype != torch.float32:
        raise ValueError(f"{_WHERE} fp8 GEMM: {name} must be float32, got {s.dtype}")
    if s.numel() == 1:
        return s.reshape(1).expand(n).contiguous()
    if s.numel() != n:
        raise ValueError(f"{_WHERE} fp8 GEMM: {name} has {s.numel()} elements, expected 1 or {n}")
    return _dense(s.reshape(n))


@torch.library.custom_op("titankit::tk_fp8_gemm_rowwise", mutates_args=())
def tk_fp8_gemm_rowwise(
    a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor
) -> torch.Tensor:
    m, k = a.shape
    n = b.shape[0]
    ext = build.extension()
    a, b = _dense(a), _dense(b)
    # Tensorwise (one scale each) keeps them as they are: the kernel then reads one scale each.
    tensorwise = scale_a.numel() == 1 and scale_b.numel() == 1
    sa = _rowwise_scale(scale_a, 1 if tensorwise else m, "scale_a")
    sb = _rowwise_scale(scale_b, 1 if tensorwise else n, "scale_b")
    with _unfilled(), torch.cuda.device(a.device):
        c = torch.empty((m, n), dtype=torch.bfloat16, device=a.device)
        # A partial last wave of tiles: the kernel splits the K loop of its last tiles over all SMs
        # (stream-K) and passes fp32 partials through this workspace. The flags must start at
        # zero: torch.zeros is one memset on this stream, so CUDA graph capture still works.
        n_partials, n_flags = ext.fp8_gemm_rowwise_workspace(m, n, k)
        partials = flags = None
        if n_partials:
            partials = torch.empty(n_partials, dtype=torch.float32, device=a.device)
            flags = torch.zeros(n_flags, dtype=torch.int32, device=a.device)
        ext.fp8_gemm_rowwise(a, b, sa, sb, c, partials, flags, _stream(a))
    return c


@tk_fp8_gemm_rowwise.register_fake
def _(a, b, scale_a, scale_b):
    return a.new_empty((a.shape[0], b.shape[0]), dtype=torch.bfloat16)


def fp8_gemm_rowwise(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor,
                     scale_b: torch.Tensor) -> torch.Tensor:
    """c (M, N) bf16 = (a (M, K) @ b (N, K)^T) * scale_a (M, 1) * scale_b (1, N); e4m3 a, b. Scales
    may also be one element each (tensorwise; the kernel then loads no per-column scales)."""
    where = f"{_WHERE} fp8 GEMM"
    if a.dim() != 2 or b.dim() != 2 or a.shape[1] != b.shape[1]:
        raise ValueError(f"{where}: needs a (M, K) and b (N, K); got {tuple(a.shape)}, "
                         f"{tuple(b.shape)}")
    if a.dtype != torch.float8_e4m3fn or b.dtype != torch.float8_e4m3fn:
        raise ValueError(f"{where}: a and b must be float8_e4m3fn, got {a.dtype}, {b.dtype}")
    m, k = a.shape
    n = b.shape[0]
    if m == 0 or n == 0 or k == 0:
        raise ValueError(f"{where}: empty operand (M, N, K) = {(m, n, k)}")
    if k % 128 or n % 64:
        raise ValueError(f"{where}: K must be a multiple of 128 and N of 64 (whole 128-byte TMA "
                         f"chunks); got K={k}, N={n}. Use float8.backend 'torch' or 'triton'")
    if not a.is_cuda or a.device != b.device:
        raise ValueError(f"{where}: a and b must be on the same CUDA device")
    return tk_fp8_gemm_rowwise(a, b, scale_a, scale_b)


def scaled_mm(a: torch.Tensor, b: torch.Tensor, scale_a: torch.Tensor, scale_b: torch.Tensor,
              out_dtype: torch.dtype = torch.bfloat16) -> torch.Tensor:
    """kernels.fp8.scaled_mm's contract: a (M, K) row-major, b (K, N) column-major (b.t() is the
    (N, K) row-major operand, no copy), scales rowwise (M, 1) / (1, N) or one element each."""
    return fp8_gemm_rowwise(a, b.t(), scale_a, scale_b).to(out_dtype)
