"""`python -m kernels.bench attention --sweep`: the Triton attention variants, kernel by kernel.

On one shape (the ANCHORS shape by default) every entry pins one tile config of one kernel under
one set of triton_launch.SETTINGS and times that kernel alone (forward; backward preprocess, dK/dV,
dQ); then whole backward passes combine the fastest entries of each dQ mode, and the 70B-TP8 shape
(one KV head) tries each dK/dV split. Rows print as they complete (a compiler crash still leaves
the rows before it), entries past the time budget are skipped, and each row gives the error
against the first entry of its kernel, so a variant that computes wrong numbers shows at once.
TFLOP/s of a kernel counts its own matmuls (fwd 2, dK/dV 4, or 5 with dQ, dQ 3 per block pair);
a whole backward counts 2.5 x the forward's FLOPs (FlashAttention's convention).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch


def _dkdv(mode: str, heads_inner: bool, tma: bool) -> dict:
    return dict(dq_mode=mode, dkdv_heads_inner=heads_inner, dkdv_tma=tma)


_FWD_PTR, _FWD_TMA = dict(fwd_tma=False), dict(fwd_tma=True)
_DQ_PTR, _DQ_TMA = dict(dq_tma=False), dict(dq_tma=True)
# (label, kernel, SETTINGS fields the kernel reads, tile (BLOCK_M, BLOCK_N, warps, stages)), in
# the order they run: the likely winners and the baselines first, so a tight budget cuts the
# least informative. The first entry of a kernel is its error baseline (dq's comes before the
# first atomic entry, whose dQ is checked against it).
ENTRIES: list[tuple[str, str, dict, tuple[int, int, int, int]]] = [
    ("fwd pointers (old default)", "fwd", _FWD_PTR, (128, 64, 8, 3)),
    ("fwd TMA", "fwd", _FWD_TMA, (64, 64, 4, 3)),
    ("bwd preprocess", "pre", {}, (64, 0, 4, 1)),
    ("dkdv head-major (~old)", "dkdv", _dkdv("recompute", False, False), (64, 128, 8, 2)),
    ("dq pointers", "dq", _DQ_PTR, (128, 64, 8, 3)),
    ("dkdv+dQ tma_atomic heads-inner TMA", "dkdv", _dkdv("tma_atomic", True, True),
     (64, 128, 8, 2)),
    ("dkdv heads-inner", "dkdv", _dkdv("recompute", True, False), (64, 128, 8, 2)),
    ("dkdv heads-inner TMA", "dkdv", _dkdv("recompute", True, True), (64, 128, 8, 2)),
    ("dq TMA", "dq", _DQ_TMA, (128, 64, 8, 3)),
    ("dkdv+dQ tma_atomic heads-inner", "dkdv", _dkdv("tma_atomic", True, False), (64, 128, 8, 2)),
    ("dkdv+dQ tma_atomic head-major TMA", "dkdv", _dkdv("tma_atomic", False, True),
     (64, 128, 8, 2)),
    ("dkdv+dQ atomic heads-inner", "dkdv", _dkdv("atomic", True, False), (64, 128, 8, 2)),
    ("dkdv+dQ tma_atomic heads-inner TMA", "dkdv", _dkdv("tma_atomic", True, True),
     (64, 128, 8, 3)),
    ("dkdv heads-inner TMA", "dkdv", _dkdv("recompute", True, True), (64, 128, 8, 3)),
    ("dkdv heads-inner", "dkdv", _dkdv("recompute", True, False), (64, 128, 8, 3)),
    ("dkdv head-major TMA", "dkdv", _dkdv("recompute", False, True), (64, 128, 8, 2)),
    ("dq pointers", "dq", _DQ_PTR, (128, 64, 8, 2)),
    ("dq TMA", "dq", _DQ_TMA, (128, 128, 8, 2)),
    ("fwd TMA", "fwd", _FWD_TMA, (128, 64, 8, 3)),
    ("fwd TMA", "fwd", _FWD_TMA, (128, 128, 8, 2)),
    ("fwd TMA", "fwd", _FWD_TMA, (128, 128, 8, 3)),
    ("fwd TMA", "fwd", _FWD_TMA, (128, 64, 4, 3)),
    ("fwd pointers (old default)", "fwd", _FWD_PTR, (128, 128, 8, 2)),
    ("dkdv+dQ tma_atomic heads-inner TMA", "dkdv", _dkdv("tma_atomic", True, True),
     (32, 128, 8, 2)),
    ("dkdv heads-inner", "dkdv", _dkdv("recompute", True, False), (128, 128, 8, 2)),
]
SPLIT_MODES = ("recompute", "tma_atomic")  # dQ modes tried on the few-KV-head shape
MATMULS = {"fwd": 1.0, "pre": 0.0, "dkdv": 2.0, "dq": 1.5}  # x forward FLOPs (dkdv+dQ: 2.5)
SPLITS = (1, 2, 4, 8)


def _sync() -> None:
    if torch.cuda.is_available():
        torch.cuda.synchronize()


@dataclass
class Result:
    label: str
    kernel: str
    settings: dict
    tile: tuple[int, int, int, int]
    ms: float


@dataclass
class Sweep:
    """State of one sweep run: inputs, baselines, results; `out` prints one line (flushes)."""

    shape: tuple
    budget_s: float
    device: str = "cuda"
    dtype: torch.dtype = torch.bfloat16
    out: object = print
    results: list[Result] = field(default_factory=list)
    start: float = field(default_factory=time.perf_counter)

    def __post_init__(self) -> None:
        from kernels.attention import bench

        self.bench = bench
        b, hq, hkv, s, d, _ = self.shape
        g = torch.Generator(device=self.device).manual_seed(0)
        self.q, self.k, self.v, self.do = (
            torch.randn(b, s, h, d, device=self.device, generator=g).to(self.dtype)
            for h in (hq, hkv, hkv, hq))
        self.flops = bench._flops_fwd(b, hq, s, d, 0)
        self.baseline: dict[str, tuple[torch.Tensor, ...]] = {}

    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def _buffers(self):
        q, k = self.q, self.k
        return (torch.empty_like(q), torch.empty(q.shape[0], q.shape[2], q.shape[1],
                device=q.device), torch.empty_like(q), torch.empty_like(k), torch.empty_like(k))

    def _call(self, kernel: str, mode: str):
        """A closure running one kernel on fixed inputs, and the tensors it writes."""
        from kernels.attention import triton_launch as tl_

        q, k, v, do = self.q, self.k, self.v, self.do
        out, lse, dq, dk, dv = self._buffers()
        if kernel == "fwd":
            return (lambda: tl_.fwd(q, k, v, True, None, None, out, lse)), (out, lse)
        ref_out, ref_lse = self.reference_fwd()
        if kernel == "pre":
            return (lambda: tl_.bwd_preprocess(ref_out, do, ref_lse, None)), ()
        delta, lse2 = tl_.bwd_preprocess(ref_out, do, ref_lse, None)
        if kernel == "dkdv":
            acc = {}

            def dkdv():
                acc["dq"] = tl_.bwd_dkdv(q, k, v, do, lse2, delta, True, None, None, mode, dk, dv)
            return dkdv, (dk, dv, acc)
        if kernel == "dq":
            return (lambda: tl_.bwd_dq(q, k, v, do, lse2, delta, True, None, None, dq)), (dq,)
        return (lambda: tl_.bwd(do, q, k, v, ref_out, ref_lse, True, None, None, None,
                                dq, dk, dv)), (dq, dk, dv)

    def reference_fwd(self):
        if "ref_fwd" not in self.baseline:
            from kernels.attention import triton_launch as tl_

            out, lse, *_ = self._buffers()
            with tl_.settings(config_override={"fwd": (128, 64, 8, 3)}, fwd_tma=False):
                tl_.fwd(self.q, self.k, self.v, True, None, None, out, lse)
            self.baseline["ref_fwd"] = (out, lse)
        return self.baseline["ref_fwd"]

    def _error(self, kernel: str, outs) -> str:
        """Max relative error (norm ratio) of this entry's outputs against its kernel's first
        entry; an atomic-dQ entry's dQ against the dq kernel's first entry."""
        if kernel == "pre":
            return ""
        if kernel == "dkdv":
            dq = outs[2].get("dq")
            outs = (outs[0], outs[1]) + ((dq.transpose(1, 2),) if dq is not None else ())
        outs = tuple(t.float() for t in outs)
        if kernel not in self.baseline:
            keep = outs[:2] if kernel == "dkdv" else outs  # dK, dV (an atomic baseline's dQ aside)
            self.baseline[kernel] = tuple(t.clone() for t in keep)
            return "baseline"
        ref = self.baseline[kernel]
        if kernel == "dkdv" and len(outs) == 3:
            ref = ref + self.baseline.get("dq", (None,))[:1]
        errs = [((a - b).norm() / b.norm()).item() for a, b in zip(outs, ref) if b is not None]
        return f"{max(errs):.1e}"

    def run_entries(self) -> None:
        from kernels.attention import triton_launch as tl_

        self.out("\n## sweep: each kernel alone, pinned tiles "
                 f"(shape B,Hq,Hkv,S,D = {self.shape[:5]}, budget {self.budget_s:.0f} s)\n")
        self.out("| kernel | variant | tile (BM, BN, warps, stages) | ms | TFLOP/s | rel err |")
        self.out("|---|---|---|---|---|---|")
        for label, kernel, fields, tile in ENTRIES:
            if self.elapsed() > self.budget_s:
                self.out(f"| {kernel} | {label} | {tile} | skipped (time budget) | | |")
                continue
            mode = fields.get("dq_mode", "recompute")
            mult = 2.5 if (kernel == "dkdv" and mode != "recompute") else MATMULS[kernel]
            try:
                with tl_.settings(**fields, config_override={kernel: tile}):
                    fn, outs = self._call(kernel, mode)
                    fn()
                    _sync()
                    err = self._error(kernel, outs)
                    ms = self.bench._time(fn)
            except Exception as e:  # noqa: BLE001 - e.g. out of shared memory: report, go on
                msg = f"{type(e).__name__}: {' '.join(str(e).split())[:70]}"
                self.out(f"| {kernel} | {label} | {tile} | n/a: {msg} | | |")
                continue
            self.results.append(Result(label, kernel, fields, tile, ms))
            tf = f"{mult * self.flops / ms / 1e9:.0f}" if mult else ""
            self.out(f"| {kernel} | {label} | {tile} | {ms:.3f} | {tf} | {err} |")

    def best(self, kernel: str, mode: str | None = None) -> Result | None:
        rows = [r for r in self.results if r.kernel == kernel
                and (mode is None or r.settings.get("dq_mode", "recompute") == mode)]
        return min(rows, key=lambda r: r.ms) if rows else None

    def best_settings(self) -> dict[str, dict]:
        """Per dQ mode, SETTINGS fields combining the fastest measured entries (pinned tiles)."""
        fwd = self.best("fwd")
        combos = {}
        for mode in ("recompute", "atomic", "tma_atomic"):
            dkdv = self.best("dkdv", mode)
            if fwd is None or dkdv is None:
                continue
            fields = {**fwd.settings, **dkdv.settings}
            override = {"fwd": fwd.tile, "dkdv": dkdv.tile}
            if mode == "recompute":
                dq = self.best("dq")
                if dq is None:
                    continue
                fields.update(dq.settings)
                override["dq"] = dq.tile
            combos[mode] = {**fields, "dq_mode": mode, "config_override": override}
        return combos

    def run_backward(self, combos: dict[str, dict]) -> None:
        """Whole backward (preprocess + kernels + dQ conversion) per dQ mode, fastest tiles."""
        from kernels.attention import triton_launch as tl_

        self.out("\n## sweep: whole passes per dQ mode, fastest entries combined\n")
        self.out("| dQ mode | settings | fwd ms | bwd ms | fwd TFLOP/s | bwd TFLOP/s | "
                 "fwd+bwd TFLOP/s (% of 751) | rel err |")
        self.out("|---|---|---|---|---|---|---|---|")
        for mode, fields in combos.items():
            shown = {k: v for k, v in fields.items() if k != "config_override"}
            try:
                with tl_.settings(**fields):
                    fwd_fn, _ = self._call("fwd", mode)
                    bwd_fn, outs = self._call("bwd", mode)
                    bwd_fn()
                    _sync()
                    ref = self.baseline.get("dq", (None,))[:1] + self.baseline.get("dkdv", ())[:2]
                    errs = [((a.float() - b).norm() / b.norm()).item()
                            for a, b in zip(outs, ref) if b is not None]
                    f_ms, b_ms = self.bench._time(fwd_fn), self.bench._time(bwd_fn)
            except Exception as e:  # noqa: BLE001
                self.out(f"| {mode} | {shown} | n/a: {type(e).__name__}: {str(e)[:60]} |||||||")
                continue
            tot = 3.5 * self.flops / (f_ms + b_ms) / 1e9
            self.out(f"| {mode} | {shown} {fields['config_override']} | {f_ms:.3f} | {b_ms:.3f} | "
                     f"{self.flops / f_ms / 1e9:.0f} | {2.5 * self.flops / b_ms / 1e9:.0f} | "
                     f"{tot:.0f} ({100 * tot / self.bench.MATMUL_CEILING:.0f}%) | "
                     f"{max(errs) if errs else float('nan'):.1e} |")

    def run_splits(self, shape: tuple, combos: dict[str, dict]) -> None:
        """The few-KV-head shape: whole backward per dK/dV split of the query-head group."""
        from kernels.attention import triton_launch as tl_

        b, hq, hkv, s, d, _ = shape
        small = Sweep(shape, self.budget_s, self.device, self.dtype, self.out)
        small.start = self.start
        self.out(f"\n## sweep: dK/dV split, shape B,Hq,Hkv,S,D = {shape[:5]}\n")
        self.out("| dQ mode | split | bwd ms | bwd TFLOP/s |")
        self.out("|---|---|---|---|")
        for mode, fields in combos.items():
            if mode not in SPLIT_MODES:
                continue
            for split in SPLITS:
                if (hq // hkv) % split:  # (not under the budget: few rows, few compiles)
                    self.out(f"| {mode} | {split} | skipped: does not divide the group | |")
                    continue
                try:
                    with tl_.settings(**fields, dkdv_split=split):
                        fn, _ = small._call("bwd", mode)
                        ms = self.bench._time(fn)
                except Exception as e:  # noqa: BLE001
                    self.out(f"| {mode} | {split} | n/a: {type(e).__name__}: {str(e)[:60]} | |")
                    continue
                self.out(f"| {mode} | {split} | {ms:.3f} | {2.5 * small.flops / ms / 1e9:.0f} |")
        auto = tl_.dkdv_split(b, hkv, hq // hkv, s, torch.device(self.device))
        self.out(f"\n(automatic split for this shape: {auto})")


def run(shape: tuple, split_shape: tuple, budget_s: float, out=print, device: str = "cuda",
        dtype: torch.dtype = torch.bfloat16) -> dict[str, dict]:
    """The whole sweep; returns the best SETTINGS fields per dQ mode (for the table's rows)."""
    sweep = Sweep(shape, budget_s, device, dtype, out)
    sweep.run_entries()
    combos = sweep.best_settings()
    sweep.run_backward(combos)
    sweep.run_splits(split_shape, combos)
    out(f"\n(sweep took {sweep.elapsed():.0f} s)")
    return combos
