"""RoPE with the reference's FP32 table and YaRN profile (interleaved pairs on the last
`rope_dim` dims).  Ratio-0 layers use `rope_theta` without YaRN; compressed layers use
`compress_rope_theta` with the YaRN frequency ramp at every position (no attention
factor)."""

from __future__ import annotations

import math

import torch

from .numerics import Numerics

_F32 = torch.float32


def rope_frequencies(rope_dim: int, base: float, yarn: dict | None) -> torch.Tensor:
    """f_i = 1 / base^(2i/d) in FP32, blended towards f_i / factor by the YaRN ramp."""
    freqs = 1.0 / (base ** (torch.arange(0, rope_dim, 2, dtype=_F32) / rope_dim))
    if yarn is None:
        return freqs
    orig = yarn["original_max_position_embeddings"]

    def correction_dim(rotations):
        return rope_dim * math.log(orig / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low = max(math.floor(correction_dim(yarn["beta_fast"])), 0)
    high = min(math.ceil(correction_dim(yarn["beta_slow"])), rope_dim - 1)
    if low == high:
        high += 0.001
    ramp = ((torch.arange(rope_dim // 2, dtype=_F32) - low) / (high - low)).clamp(0, 1)
    smooth = 1 - ramp
    return freqs / yarn["factor"] * (1 - smooth) + freqs * smooth


class RopeTable:
    """Rotation tables for angle fp32(p) * f_i (an FP32 product), cached per length.

    `tables(n, width)` returns full-width multipliers for apply_rope: cos and a signed
    sin, 1 and 0 on the first width - rope_dim (non-rotated) dims."""

    def __init__(self, rope_dim: int, base: float, yarn: dict | None):
        self.rope_dim = rope_dim
        self.freqs = rope_frequencies(rope_dim, base, yarn)
        self._cache: dict[tuple, tuple] = {}

    def tables(self, n: int, width: int, stride: int = 1):
        """Positions 0, stride, 2*stride, ... (n of them) -> (cos, sin) [n, width]."""
        key = (n, width, stride)
        if key not in self._cache:
            if len(self._cache) >= 32:
                self._cache.pop(next(iter(self._cache)))
            self._cache[key] = self.tables_at(torch.arange(n) * stride, width)
        return self._cache[key]

    def tables_at(self, positions: torch.Tensor, width: int):
        """(cos, sin) [len(positions), width] for arbitrary positions."""
        n, rd = positions.numel(), self.rope_dim
        ang = torch.outer(positions.reshape(-1).to(_F32), self.freqs)
        cos = torch.ones(n, width)
        sin = torch.zeros(n, width)
        cos[:, width - rd:] = torch.cos(ang).repeat_interleave(2, dim=1)
        s = torch.sin(ang)
        sin[:, width - rd::2] = -s
        sin[:, width - rd + 1::2] = s
        return cos, sin


def apply_rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, nx: Numerics,
               inverse: bool = False) -> torch.Tensor:
    """Rotates the pairs (x[2i], x[2i+1]) of the last rope dims by +theta (or -theta):
    (a c - b s, b c + a s), FP32, BF16 write-back.  cos/sin are RopeTable.tables rows
    broadcastable against x; the other dims pass unchanged (x * 1 + x' * 0 is exact)."""
    swapped = x.unflatten(-1, (-1, 2)).flip(-1).flatten(-2)
    rot = x * cos - swapped * sin if inverse else x * cos + swapped * sin
    return nx.bf16(rot)
