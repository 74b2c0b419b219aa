"""`python -m kernels.bench <op> [args]`: benchmark one op family against its reference and baselines.

Each family keeps its benchmark in `kernels/<family>/bench.py` with a `main(argv) -> int`; this file
only dispatches, so adding an op never touches another family's code.
"""

from __future__ import annotations

import importlib
import sys

OPS = {
    "attention": "kernels.attention.bench",
    "fp8_gemm": "kernels.fp8.bench",
    "rmsnorm": "kernels.norm.bench",
    "grouped_mm": "kernels.moe.bench",
    "thunderkittens": "kernels.thunderkittens.bench",
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if not argv or argv[0] not in OPS:
        print(f"usage: python -m kernels.bench {{{'|'.join(OPS)}}} [options]", file=sys.stderr)
        return 2
    module = importlib.import_module(OPS[argv[0]])
    return int(module.main(argv[1:]) or 0)


if __name__ == "__main__":
    sys.exit(main())
