"""Where the deterministic backward's time goes: variants of its turn-taking picked per launch by
TK_DET_AB (det_variants.patch), interleaved round by round with the default backward.
  0  as committed: wait for the predecessor's turn, add, pass the turn once the add completed (at
     the next add)
  1  no turns (order of the adds not enforced), full completion wait before each add kept
  2  no turns, staging-read wait only: the default backward with the deterministic tile order
  3  turn passed at the end of the iteration (after dV, dK) instead of at the next add
Usage: python3 det_variants.py [rounds] [shape,...]"""
import os
import statistics
import sys

import torch

from kernels.thunderkittens import ops
from kernels.thunderkittens.bench import _time as bench

SHAPES = {"anchor": (64, 8, 8192), "8b": (32, 8, 8192), "70b-tp8": (8, 1, 8192)}


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    names = sys.argv[2].split(",") if len(sys.argv) > 2 else list(SHAPES)
    print(torch.cuda.get_device_name(), torch.__version__, flush=True)
    rows = []
    for name in names:
        hq, hkv, s = SHAPES[name]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, s, h, 128, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        flops = 2.5 * 4.0 * hq * s * s * 128 / 2
        o, lse = ops.attention_fwd(q, k, v, causal=True)
        bwd = lambda: ops.attention_bwd(do, q, k, v, o, lse, causal=True)  # noqa: E731
        for var in ("0", "3"):
            os.environ["TK_DET_AB"] = var
            torch.use_deterministic_algorithms(True)
            a, b = bwd(), bwd()
            torch.use_deterministic_algorithms(False)
            print(name, "variant", var, "bitwise equal (dq, dk, dv):",
                  [torch.equal(x, y) for x, y in zip(a, b)], flush=True)
        res = {}
        for _ in range(rounds):
            for var in ("default", "0", "1", "2", "3"):
                os.environ["TK_DET_AB"] = "0" if var == "default" else var
                torch.use_deterministic_algorithms(var != "default")
                try:
                    res.setdefault(var, []).append(flops / bench(bwd) / 1e9)
                finally:
                    torch.use_deterministic_algorithms(False)
        for var, xs in res.items():
            rows.append(f"| {name} | {var} | {', '.join(f'{x:.0f}' for x in xs)}; "
                        f"{statistics.median(xs):.0f} |")
        del q, k, v, do, o, lse
        torch.cuda.empty_cache()
    print("\n| shape | variant | backward alone TFLOP/s (rounds; median) |\n|---|---|---|")
    print("\n".join(rows))


if __name__ == "__main__":
    main()
