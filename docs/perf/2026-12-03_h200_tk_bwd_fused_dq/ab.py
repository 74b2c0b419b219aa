"""A/B of the ThunderKittens backward with dQ converted inside the main kernel ("tree": the working
tree with fused_dq.patch applied, `git apply docs/perf/2026-12-03_h200_tk_bwd_fused_dq/fused_dq.patch`)
against main before it ("head": the tree's kernel sources with fused_dq.patch reversed, whose
binding takes the old arguments), plus "discard": the tree with the converted block's L2 lines
dropped (discard.global.L2) instead of written back. One process; for each shape: forward output
and LSE bitwise, dK and dV bitwise, dQ's largest difference against head; then do_bench medians of
forward + backward (explicit calls, no autograd), builds rotated round by round, `cooldown` s idle
before each measurement; then a torch.profiler table of the kernels of 10 passes of each build.

  python3 docs/perf/2026-12-03_h200_tk_bwd_fused_dq/ab.py [rounds] [cooldown]
"""
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from kernels.thunderkittens import bench as B
from kernels.thunderkittens import build, ops

HERE = Path(__file__).resolve().parent
PATCH = HERE / "fused_dq.patch"
sys.path.insert(0, str(HERE.parent / "2026-12-02_h200_tk_smem_allocator"))
import alloc_ab  # noqa: E402  (edited_extension: a build from edited copies of the sources)


def patched(file_name, text, reverse=False, patch=PATCH):
    """One kernel source file's text with its part of `patch` (fused_dq.patch) applied (reverse: undone)."""
    for chunk in patch.read_text().split("diff --git ")[1:]:
        if chunk.startswith(f"a/kernels/thunderkittens/{file_name} "):
            with tempfile.TemporaryDirectory() as tmp:
                f = Path(tmp) / file_name
                f.write_text(text)
                subprocess.run(["patch", *(["-R"] if reverse else []), str(f)], input="diff --git " + chunk,
                               text=True, check=True, capture_output=True)
                return f.read_text()
    return text


def unpatch(file_name, text):
    """The kernel sources back to main's (the tree holds fused_dq.patch)."""
    return patched(file_name, text, reverse=True)


def add_discard(file_name, text):
    """The tree's sources with the converted block's L2 lines discarded after each conversion."""
    if file_name != "attention_bwd_sm90.cu":
        return text
    old = ("            *reinterpret_cast<bf16_2*>(at + 8 * stride) = __floats2bfloat162_rn(v.z * scale, v.w * scale);\n"
           "        }\n    }\n}\n")
    assert text.count(old) == 1
    new = old[:-2] + ("    __syncwarp();  // every lane's loads returned (their values were stored)\n"
                      "    for (int l = lane; l < bwd_cfg<D>::DQ_BLOCK * 4 / 128; l += 32) {\n"
                      "        asm volatile(\"discard.global.L2 [%0], 128;\\n\" ::\"l\"(reinterpret_cast<const char*>(blk) + 128 * l) : \"memory\");\n"
                      "    }\n}\n")
    return text.replace(old, new)


def buffers(ext, q, k):
    """The default-mode backward's workspace and outputs, as ops.tk_attn_bwd allocates them."""
    b, sq, hq, d = q.shape
    sp = ext.attn_bwd_padded_len(sq)
    delta = torch.empty((b, hq, sp), dtype=torch.float32, device=q.device)
    lse2 = torch.empty_like(delta)
    dq_acc = torch.empty((b, hq, sp, d), dtype=torch.float32, device=q.device)
    split = ext.attn_bwd_kv_split(b, hq, k.shape[2], k.shape[1])
    dkv_acc = None if split == 1 else torch.empty((2, k.shape[0], *k.shape[1:]), dtype=torch.float32, device=q.device)
    return delta, lse2, dq_acc, dkv_acc, torch.empty_like(q), torch.empty_like(k), torch.empty_like(k)


def head_bwd(ext, dout, q, k, v, out, lse):
    """main's ops.tk_attn_bwd before the change (default mode), on head's binding."""
    delta, lse2, dq_acc, dkv_acc, dq, dk, dv = buffers(ext, q, k)
    ext.attn_bwd(dout, q, k, v, out, lse, None, delta, lse2, dq_acc, dkv_acc, None, dq, dk, dv, True,
                 torch.cuda.current_stream().cuda_stream)
    return dq, dk, dv


def runner(name, ext):
    def fwd(q, k, v):
        build._EXTENSION = ext
        return ops.tk_attn_fwd(q, k, v, True)

    def bwd(do, q, k, v, out, lse):
        if name == "head":
            return head_bwd(ext, do, q, k, v, out, lse)
        build._EXTENSION = ext
        return ops.tk_attn_bwd(do, q, k, v, out, lse, True, None)

    return fwd, bwd


def main():
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    t0 = time.time()
    exts = {"tree": build.extension()}
    exts["head"] = alloc_ab.edited_extension("titankit_tk_head", unpatch)
    exts["discard"] = alloc_ab.edited_extension("titankit_tk_discard", add_discard)
    print(f"builds {time.time() - t0:.0f} s", flush=True)
    names = list(exts)
    run = {n: runner(n, exts[n]) for n in names}
    print("| shape | build | fwd+bwd by round | median | checks vs head |")
    print("|---|---|---|---|---|")
    for shape in ("anchor", "8b", "70b-tp8"):
        b, hq, hkv, s, d = B.ATTN_SHAPES[shape]
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(b, s, h, d, device="cuda", generator=g).bfloat16() for h in (hq, hkv, hkv, hq))
        res = {}
        for n in names:
            fwd, bwd = run[n]
            out, lse = fwd(q, k, v)
            res[n] = (out, lse, *bwd(do, q, k, v, out, lse))
        o = res["head"]
        checks = {n: (f"out, lse bitwise {torch.equal(a[0], o[0]) and torch.equal(a[1], o[1])}; "
                      f"dk, dv bitwise {torch.equal(a[3], o[3]) and torch.equal(a[4], o[4])}; "
                      f"dq max diff {(a[2].float() - o[2].float()).abs().max().item():.1e} "
                      f"(|dq| max {o[2].float().abs().max().item():.1e})") for n, a in res.items()}
        flops = 4.0 * b * hq * s * s * d / 2
        both = {n: [] for n in names}
        for r in range(rounds):
            for n in names[r % len(names):] + names[:r % len(names)]:
                fwd, bwd = run[n]

                def step(fwd=fwd, bwd=bwd):
                    out, lse = fwd(q, k, v)
                    bwd(do, q, k, v, out, lse)

                time.sleep(cooldown)
                both[n].append(3.5 * flops / B._time(step) / 1e9)
        for n in names:
            x = both[n]
            print(f"| {shape} | {n} | {', '.join(f'{v:.0f}' for v in x)} | {sorted(x)[len(x) // 2]:.0f} | {checks[n]} |", flush=True)
    # Kernel times at the anchor shape, 10 passes after 3.
    b, hq, hkv, s, d = B.ATTN_SHAPES["anchor"]
    q, k, v, do = (torch.randn(b, s, h, d, device="cuda").bfloat16() for h in (hq, hkv, hkv, hq))
    for n in names:
        fwd, bwd = run[n]
        for _ in range(3):
            bwd(do, q, k, v, *fwd(q, k, v))
        torch.cuda.synchronize()
        with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
            for _ in range(10):
                bwd(do, q, k, v, *fwd(q, k, v))
            torch.cuda.synchronize()
        print(f"\n{n}: kernels of 10 anchor forward+backward passes")
        print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=8, max_name_column_width=60))


if __name__ == "__main__":
    main()
