"""A/B of the ThunderKittens attention with the working tree's sources ("tree") against a second
extension built from the same sources with the REVERT edits applied ("head": main before this
change), both in one process. For the anchor, 8B and 70B-TP8 shapes: forward output and LSE
bitwise, dK and dV bitwise, dQ within the spread of its fp32 adds; then do_bench medians of the
forward and of forward+backward, builds alternating first round by round, `cooldown` s idle before
each measurement. Other experiments import it with their own REVERT list.

  python3 docs/perf/2026-12-03_h200_tk_bwd_shared_loads/ab.py [rounds] [cooldown]
"""
import os
import sys
import time

from kernels.thunderkittens import build

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "2026-12-02_h200_tk_smem_allocator"))
import alloc_ab  # noqa: E402  (the attention A/B loop of 4r)

# (file, text in the tree, text in head): the backward's tiles through detail::smem_allocator,
# whose base is now computed from the pointer itself (so nvcc keeps it in the shared window).
REVERT = [
    ("attention_bwd_sm90.cu", "    detail::smem_allocator al(&smem[0]);",
     "    tma_swizzle_allocator al((int*)&smem[0]);"),
    ("tk_common.cuh",
     "        : base_(static_cast<char*>(smem) +\n"
     "                ((0u - static_cast<uint32_t>(reinterpret_cast<uintptr_t>(smem))) & 1023u)) {}",
     "        : base_(reinterpret_cast<char*>((reinterpret_cast<uintptr_t>(smem) + 1023) &\n"
     "                                        ~static_cast<uintptr_t>(1023))) {}"),
]


def head_extension(revert):
    edits = {}
    for name, tree, head in revert:
        edits.setdefault(name, []).append((tree, head))

    def undo(file_name, text):
        for tree, head in edits.pop(file_name, []):
            assert text.count(tree) == 1, (file_name, tree)
            text = text.replace(tree, head)
        return text

    ext = alloc_ab.edited_extension("titankit_tk_head", undo)
    assert not edits, edits  # every REVERT file was among the sources
    return ext


def main(revert, shapes=None, more=()):
    """tree against head (the REVERT edits), plus one build per (name, edit) of `more`, each built
    from the tree's sources through edit(file_name, text); shapes as alloc_ab.attention_ab takes them."""
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    exts = {"tree": build.extension()}
    t0 = time.time()
    exts["head"] = head_extension(revert)
    for name, edit in more:
        exts[name] = alloc_ab.edited_extension(f"titankit_tk_{name}", edit)
    label = " and ".join(["head", *(name for name, _ in more)])
    print(f"{label} build{'s' if more else ''} {time.time() - t0:.0f} s", flush=True)
    alloc_ab.attention_ab(exts, rounds, cooldown, shapes)


if __name__ == "__main__":
    main(REVERT)
