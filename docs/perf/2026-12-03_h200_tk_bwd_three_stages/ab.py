"""A/B of the backward with the patched sources in the working tree ("tree") against a copy of
main's attention_bwd_sm90.cu ("head"), built as a second extension in the same process; checks and
timing as in docs/perf/2026-12-03_h200_tk_bwd_shared_loads/ab.py.

  cp kernels/thunderkittens/attention_bwd_sm90.cu /tmp/main_bwd.cu && git apply <patch>
  python3 docs/perf/2026-12-03_h200_tk_bwd_three_stages/ab.py /tmp/main_bwd.cu [rounds] [cooldown]
"""
import os
import sys
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..",
                                "2026-12-03_h200_tk_bwd_shared_loads"))
import ab as shared_loads_ab  # noqa: E402

from kernels.thunderkittens import build  # noqa: E402

if __name__ == "__main__":
    main_copy = Path(sys.argv.pop(1))
    name = "attention_bwd_sm90.cu"
    tree, head = (build.SRC_DIR / name).read_text(), main_copy.read_text()
    assert tree != head, "the working tree is not patched"
    shared_loads_ab.main([(name, tree, head)])
