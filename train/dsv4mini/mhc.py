"""Manifold-constrained hyper-connections (mHC): the residual is `hc` parallel streams.

hc_pre mixes the streams into one sub-layer input (weights `pre`) and produces the
`post` weights of the sub-layer output and a doubly stochastic `comb` matrix (Sinkhorn)
that mixes the old streams; hc_post applies them; hc_head reduces the streams to one
vector before the final norm.  All FP32, outputs stored BF16.
"""

from __future__ import annotations

import torch

from .numerics import Numerics


def hc_mixes(x: torch.Tensor, fn: torch.Tensor, eps: float) -> torch.Tensor:
    """(v . fn^T) * rsqrt(mean(v^2) + eps) with v the streams flattened stream-major."""
    v = x.flatten(-2)
    r = torch.rsqrt((v * v).mean(-1, keepdim=True) + eps)
    return torch.matmul(v, fn.t()) * r


def sinkhorn(logits: torch.Tensor, iters: int, eps: float) -> torch.Tensor:
    """Row softmax + eps, column normalization, then iters-1 rounds of row and column
    normalization (each sum + eps).  logits [..., hc, hc]; row = source stream."""
    c = torch.softmax(logits, dim=-1) + eps
    c = c / (c.sum(-2, keepdim=True) + eps)
    for _ in range(iters - 1):
        c = c / (c.sum(-1, keepdim=True) + eps)
        c = c / (c.sum(-2, keepdim=True) + eps)
    return c


def hc_pre(x, fn, scale, base, hc: int, iters: int, norm_eps: float, hc_eps: float,
           nx: Numerics):
    """x [..., hc, D] -> (a [..., D] BF16, post [..., hc], comb [..., hc, hc])."""
    m = hc_mixes(x, fn, norm_eps)
    pre = torch.sigmoid(m[..., :hc] * scale[0] + base[:hc]) + hc_eps
    post = 2 * torch.sigmoid(m[..., hc:2 * hc] * scale[1] + base[hc:2 * hc])
    logits = (m[..., 2 * hc:] * scale[2] + base[2 * hc:]).unflatten(-1, (hc, hc))
    comb = sinkhorn(logits, iters, hc_eps)
    return nx.bf16(weighted_sum(pre, x, nx)), post, comb


def _bmm(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """a [..., m, k] @ b [..., k, n] as one 3-D bmm over the flattened leading dims (a
    4-D matmul of many small matrices takes a much slower per-matrix path on CPU)."""
    lead = a.shape[:-2]
    out = torch.bmm(a.reshape(-1, *a.shape[-2:]), b.reshape(-1, *b.shape[-2:]))
    return out.view(*lead, *out.shape[-2:])


def weighted_sum(w: torch.Tensor, x: torch.Tensor, nx: Numerics) -> torch.Tensor:
    """sum_j w[..., j] * x[..., j, :]."""
    if nx.ref:
        return _bmm(w.unsqueeze(-2), x).squeeze(-2)
    # Training: hc (= 4) broadcast multiply-adds instead of one bmm of thousands of
    # 1 x hc matrices, which torch runs matrix by matrix (8x slower forward here, and
    # the backward likewise); FP32 either way.
    return sum(w[..., j, None] * x[..., j, :] for j in range(x.shape[-2]))


def hc_post(f, res, post, comb, nx: Numerics):
    """New stream k = post_k * f + sum_j comb[j, k] * res_j."""
    if nx.ref:
        mixed = _bmm(comb.transpose(-1, -2), res)
    else:  # as in weighted_sum: hc multiply-adds of [..., hc, D] (4x faster than bmm)
        mixed = sum(comb[..., j, :, None] * res[..., j, None, :] for j in range(res.shape[-2]))
    return nx.bf16(torch.addcmul(mixed, post.unsqueeze(-1), f.unsqueeze(-2)))


def hc_head(x, fn, scale, base, norm_eps: float, hc_eps: float, nx: Numerics):
    """x [..., hc, D] -> sum_j pre_j x_j [..., D] BF16."""
    m = hc_mixes(x, fn, norm_eps)
    pre = torch.sigmoid(m * scale[0] + base) + hc_eps
    return nx.bf16(weighted_sum(pre, x, nx))
