"""Rotary position embedding (Su et al., 2021, arXiv:2104.09864) with Llama-3.1 frequency scaling.

The model keeps one table of cos/sin per position, (max_seq_len, head_dim) = [cos | sin], and looks
rows up by position. Looking up (instead of slicing [:S]) lets context parallelism hand each rank
the positions of its load-balanced chunks. Pairs are adjacent elements (x[2i], x[2i+1]), Meta's
layout (llama/model.py `apply_rotary_emb`), so Meta checkpoints load without permuting wq/wk.
"""

from __future__ import annotations

import math

import torch

from trainer.models.llama_args import LlamaArgs


def rope_frequencies(args: LlamaArgs, device: torch.device | str | None = None) -> torch.Tensor:
    """Angular frequency of each rotated pair, (head_dim // 2,) float64.

    Llama-3.1 scaling (Meta's `apply_scaling`): wavelengths shorter than
    original_max / high_freq_factor keep their frequency, longer than original_max / low_freq_factor
    are divided by scale_factor, and the band in between interpolates linearly in
    original_max / wavelength.
    """
    d = args.head_dim
    freqs = 1.0 / (args.rope_theta ** (torch.arange(0, d, 2, dtype=torch.float64, device=device) / d))
    if not args.rope_scaling:
        return freqs
    old = args.rope_original_max_seq_len
    low, high, factor = args.rope_low_freq_factor, args.rope_high_freq_factor, args.rope_scale_factor
    wavelen = 2 * math.pi / freqs
    smooth = ((old / wavelen - low) / (high - low)).clamp(0.0, 1.0)
    # smooth = 1 for short wavelengths (kept), 0 for long ones (divided by factor).
    return (1 - smooth) * freqs / factor + smooth * freqs


def rope_table(args: LlamaArgs, device: torch.device | str | None = None) -> torch.Tensor:
    """(max_seq_len, head_dim) float32: cos of every position x frequency, then sin.

    Angles are formed in float64 so that positions near 128k keep their precision (float32 would
    lose ~1e-2 rad there)."""
    freqs = rope_frequencies(args, device)
    pos = torch.arange(args.max_seq_len, dtype=torch.float64, device=device)
    angles = torch.outer(pos, freqs)  # (max_seq_len, head_dim // 2)
    return torch.cat([angles.cos(), angles.sin()], dim=-1).float()


def apply_rope(x: torch.Tensor, rope: torch.Tensor) -> torch.Tensor:
    """Rotate x (B, S, H, D) by rope rows (B or 1, S, D) = [cos | sin]; computed in fp32, x.dtype out."""
    cos, sin = rope.unsqueeze(2).float().chunk(2, dim=-1)  # each (B or 1, S, 1, D/2)
    x0, x1 = x.float().unflatten(-1, (-1, 2)).unbind(-1)  # each (B, S, H, D/2)
    out = torch.stack((x0 * cos - x1 * sin, x0 * sin + x1 * cos), dim=-1)
    return out.flatten(-2).to(x.dtype)
