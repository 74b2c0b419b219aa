"""What deterministic mode's NaN fill of torch.empty costs the TK attention op, forward+backward.

Under torch.use_deterministic_algorithms (run.deterministic), torch.utils.deterministic.
fill_uninitialized_memory (default True) makes every torch.empty write NaN (ints: their max) before
returning, so the op's outputs and workspaces (the fp32 dQ accumulator: 256 MiB at the anchor shape)
are written twice. Variants, timed as kernels.thunderkittens.bench times its rows (do_bench medians,
rotated rounds, --cooldown seconds idle before each measurement):
  default      deterministic mode off
  det          deterministic mode on, fill on (what run.deterministic gets from torch's defaults)
  det-nofill   deterministic mode on, fill off (globally, for the whole measurement)
It also checks that det and det-nofill give bitwise equal dq, dk, dv (the kernels write everything
they read). Usage: det_fill.py ROUNDS COOLDOWN SHAPES (names of kernels.thunderkittens.bench).
"""
import contextlib
import statistics
import sys

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import ops


@contextlib.contextmanager
def mode(variant):
    fill = torch.utils.deterministic.fill_uninitialized_memory
    torch.utils.deterministic.fill_uninitialized_memory = variant != "det-nofill"
    try:
        with B.deterministic_mode(variant != "default"):
            yield
    finally:
        torch.utils.deterministic.fill_uninitialized_memory = fill


def main():
    rounds, cooldown, shapes = int(sys.argv[1]), float(sys.argv[2]), sys.argv[3].split(",")
    variants = ["default", "det", "det-nofill"]
    rows = []
    for name in shapes:
        b, hq, hkv, s, d = B.ATTN_SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        fb = lambda: torch.autograd.grad(ops.attention(*leaves, causal=True), leaves, do)  # noqa
        grads = {}
        for var in ("det", "det-nofill"):
            with mode(var):
                grads[var] = fb()
        same = all(torch.equal(x, y) for x, y in zip(grads["det"], grads["det-nofill"]))

        def measure(var):
            with mode(var):
                return B._time(fb)

        res = B._rounds({v: (lambda v=v: measure(v)) for v in variants}, rounds, {}, cooldown)
        flop = 3.5 * 4.0 * b * hq * s * s * d / 2
        for var in variants:
            ms = res[var]
            rows.append(f"| {name} | {var} | {statistics.median(ms):.3f} | "
                        f"{flop / statistics.median(ms) / 1e9:.0f} | {B._by_round(flop, ms)} |")
        rows.append(f"| {name} | det == det-nofill bitwise | {same} | | |")
    print("| shape | variant | fwd+bwd ms | TFLOP/s | TFLOP/s by round |")
    print("|---|---|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
