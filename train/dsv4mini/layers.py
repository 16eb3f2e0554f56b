"""Basic modules: RMSNorm and the linear kinds of the checkpoint.

Every module holds a reference to the model's shared Numerics object (`nx`), so one
switch changes the behaviour of the whole model.  Parameters are FP32; the attribute
`ckpt_format` on each parameter names its checkpoint storage (fp8, fp4, bf16, f32),
which checkpoint.py uses for export and load.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .numerics import Numerics


def tag(p: nn.Parameter, fmt: str) -> nn.Parameter:
    p.ckpt_format = fmt
    return p


class RMSNorm(nn.Module):
    """y = (x * rsqrt(mean(x^2) + eps)) * w in FP32, stored BF16 (weight stored BF16)."""

    def __init__(self, nx: Numerics, dim: int, eps: float):
        super().__init__()
        self.nx, self.eps = nx, eps
        self.weight = tag(nn.Parameter(torch.ones(dim)), "bf16")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = x * torch.rsqrt((x * x).mean(-1, keepdim=True) + self.eps)
        return self.nx.bf16(y * self.nx.bf16_weight(self.weight))


class Fp8Linear(nn.Module):
    """FP8 weight (128x128 block scales): activation quantized per 128, BF16 output."""

    def __init__(self, nx: Numerics, in_dim: int, out_dim: int):
        super().__init__()
        self.nx = nx
        self.weight = tag(nn.Parameter(torch.empty(out_dim, in_dim)), "fp8")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nx.bf16(self.nx.linear(self.nx.act(x), self.nx.fp8_weight(self.weight)))


class Bf16Linear(nn.Module):
    """BF16 weight, BF16 GEMM (FP32 accumulation), BF16 output, no activation quant."""

    def __init__(self, nx: Numerics, in_dim: int, out_dim: int):
        super().__init__()
        self.nx = nx
        self.weight = tag(nn.Parameter(torch.empty(out_dim, in_dim)), "bf16")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.nx.bf16(self.nx.linear(x, self.nx.bf16_weight(self.weight)))


class F32Linear(nn.Module):
    """BF16-stored weight used as an FP32 GEMM with FP32 output (compressor, router)."""

    def __init__(self, nx: Numerics, in_dim: int, out_dim: int):
        super().__init__()
        self.nx = nx
        self.weight = tag(nn.Parameter(torch.empty(out_dim, in_dim)), "bf16")

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return F.linear(x, self.nx.bf16_weight(self.weight))
