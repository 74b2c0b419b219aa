"""Does the backward's last partial wave cost time on the power-limited H200?

The default causal backward runs Hkv * B * (key blocks / 2) CTAs of equal length, one per SM: at
the anchor and 8B shapes 256 CTAs on 132 SMs, two waves, the second with 8 SMs idle (97% of two
full waves). This times TK and cuDNN on S 8192, head dim 128, GQA 8:1 with Hkv in HKV: the number
of CTA waves runs from 1.94 (8) to exactly 8.00 (33); 11 gives 2.67 (3 waves, 89% full).

  python3 docs/perf/2026-12-03_h200_tk_bwd_waves/waves.py [rounds] [cooldown]

Prints per shape and round the forward and forward+backward times and the backward-only TFLOP/s
((fwd+bwd) - fwd), then a table of medians.
"""
import statistics
import sys
import time

import torch

from kernels.thunderkittens import bench, ops

HKV = [8, 11, 16, 32, 33]
S, D, GROUP = 8192, 128, 8


def waves(hkv: int, sms: int) -> float:
    return hkv * (S // 128) / 2 / sms


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 2
    cooldown = float(sys.argv[2]) if len(sys.argv) > 2 else 1.0
    sms = torch.cuda.get_device_properties(0).multi_processor_count
    impls = {"tk": lambda q, k, v: ops.attention(q, k, v, causal=True), "cudnn": bench.cudnn_attention}
    res = {}
    for hkv in HKV:
        hq = GROUP * hkv
        g = torch.Generator(device="cuda").manual_seed(0)
        q, k, v, do = (torch.randn(1, S, h, D, device="cuda", generator=g).bfloat16()
                       for h in (hq, hkv, hkv, hq))
        leaves = [t.detach().requires_grad_() for t in (q, k, v)]
        flops = 4.0 * hq * S * S * D / 2
        for r in range(rounds):
            for name in (list(impls) if r % 2 == 0 else list(impls)[::-1]):
                fn = impls[name]
                time.sleep(cooldown)
                with torch.no_grad():
                    fwd = bench._time(lambda: fn(q, k, v))
                time.sleep(cooldown)
                both = bench._time(lambda: torch.autograd.grad(fn(*leaves), leaves, do))
                bwd_tf = 2.5 * flops / (both - fwd) / 1e9
                res.setdefault((hkv, name), []).append((flops / fwd / 1e9, 3.5 * flops / both / 1e9, bwd_tf))
                print(f"Hkv {hkv} {name} round {r}: fwd {fwd:.3f} ms, fwd+bwd {both:.3f} ms, "
                      f"bwd {bwd_tf:.0f} TFLOP/s", flush=True)
        del q, k, v, do, leaves
        torch.cuda.empty_cache()
    print(f"\n{torch.cuda.get_device_name(0)}, {sms} SMs; medians over {rounds} rounds, TFLOP/s")
    print("| Hkv (Hq = 8 Hkv) | TK CTA waves | TK fwd | TK fwd+bwd | TK bwd | cuDNN fwd | cuDNN fwd+bwd | cuDNN bwd | TK / cuDNN bwd |")
    print("|---|---|---|---|---|---|---|---|---|")
    for hkv in HKV:
        t = [statistics.median(x[i] for x in res[(hkv, "tk")]) for i in range(3)]
        c = [statistics.median(x[i] for x in res[(hkv, "cudnn")]) for i in range(3)]
        print(f"| {hkv} | {waves(hkv, sms):.2f} | {t[0]:.0f} | {t[1]:.0f} | {t[2]:.0f} | "
              f"{c[0]:.0f} | {c[1]:.0f} | {c[2]:.0f} | {t[2] / c[2]:.3f} |")


if __name__ == "__main__":
    main()
