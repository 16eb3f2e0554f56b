"""Mixture of experts: router (sqrt-softplus scores; hash routing by token id on the
first layers, bias-corrected top-k elsewhere), MXFP4 routed experts, one FP8 shared
expert.  Routed outputs are summed in FP32 in ascending expert id, the shared expert
last, then stored BF16 (the reference's order)."""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .layers import F32Linear, Fp8Linear, tag
from .numerics import Numerics


def swiglu(gate: torch.Tensor, up: torch.Tensor, limit: float) -> torch.Tensor:
    """silu(min(gate, limit)) * clamp(up, -limit, limit), FP32."""
    return F.silu(gate.clamp(max=limit)) * up.clamp(-limit, limit)


class Gate(nn.Module):
    def __init__(self, nx: Numerics, cfg: ModelConfig, hashed: bool):
        super().__init__()
        self.nx, self.hashed = nx, hashed
        self.topk = cfg.num_experts_per_tok
        self.route_scale = cfg.routed_scaling_factor
        self.weight = tag(nn.Parameter(torch.empty(cfg.n_routed_experts, cfg.hidden_size)),
                          "bf16")
        if hashed:
            # Token id -> its experts; fixed, never trained.
            self.register_buffer("tid2eid", torch.zeros(cfg.vocab_size, self.topk,
                                                        dtype=torch.int64))
        else:
            # Selection-only bias, moved by update_bias (auxiliary-loss-free balancing).
            self.register_buffer("bias", torch.zeros(cfg.n_routed_experts))

    def forward(self, x: torch.Tensor, ids: torch.Tensor):
        """x [N, D], ids [N] -> (expert ids [N, k], routing weights [N, k] FP32)."""
        scores = torch.sqrt(F.softplus(F.linear(x, self.nx.bf16_weight(self.weight))))
        if self.hashed:
            idx = self.tid2eid[ids]
        else:
            idx = torch.topk((scores + self.bias).detach(), self.topk, dim=-1).indices
        w = scores.gather(1, idx)
        return idx, w / w.sum(-1, keepdim=True) * self.route_scale


class SharedExpert(nn.Module):
    def __init__(self, nx: Numerics, cfg: ModelConfig):
        super().__init__()
        self.nx, self.limit = nx, cfg.swiglu_limit
        d, inter = cfg.hidden_size, cfg.moe_intermediate_size * cfg.n_shared_experts
        self.w1 = Fp8Linear(nx, d, inter)
        self.w2 = Fp8Linear(nx, inter, d)
        self.w3 = Fp8Linear(nx, d, inter)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w2(self.nx.bf16(swiglu(self.w1(x), self.w3(x), self.limit)))


class RoutedExperts(nn.Module):
    """All routed experts' weights stacked: w1/w3 [E, I, D], w2 [E, D, I] (MXFP4)."""

    def __init__(self, nx: Numerics, cfg: ModelConfig):
        super().__init__()
        self.nx, self.limit = nx, cfg.swiglu_limit
        e, d, inter = cfg.n_routed_experts, cfg.hidden_size, cfg.moe_intermediate_size
        self.w1 = tag(nn.Parameter(torch.empty(e, inter, d)), "fp4")
        self.w2 = tag(nn.Parameter(torch.empty(e, d, inter)), "fp4")
        self.w3 = tag(nn.Parameter(torch.empty(e, inter, d)), "fp4")

    def forward(self, xq: torch.Tensor, idx: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """xq [N, D] (the FP8-quantized activation in ref), idx/w [N, k] -> [N, D] FP32
        sum of the BF16 expert outputs in ascending expert id per token."""
        nx = self.nx
        n, k = idx.shape
        flat = idx.reshape(-1)
        order = torch.sort(flat, stable=True).indices      # assignments grouped by expert
        tok = order // k
        counts = torch.bincount(flat, minlength=self.w1.shape[0]).tolist()
        # One split/unbind per tensor (not one slice per expert): their backward is a
        # single concatenation instead of a zero-filled full-size gradient per expert.
        xs = xq.index_select(0, tok).split(counts)
        ws = w.reshape(-1).index_select(0, order).unsqueeze(-1).split(counts)
        inter = self.w1.shape[1]
        w13 = torch.cat((nx.fp4_weight(self.w1), nx.fp4_weight(self.w3)), dim=1).unbind(0)
        w2 = nx.fp4_weight(self.w2).unbind(0)
        outs = []
        for e, cnt in enumerate(counts):
            if cnt == 0:
                continue
            gate, up = nx.bf16(nx.linear(xs[e], w13[e])).split(inter, dim=-1)
            h = nx.bf16(swiglu(gate, up, self.limit) * ws[e])
            outs.append(nx.bf16(nx.linear(nx.act(h), w2[e])))
        y = torch.cat(outs) if outs else xq.new_zeros(0, xq.shape[1])
        return torch.zeros_like(xq).index_add(0, tok, y)


class MoE(nn.Module):
    def __init__(self, nx: Numerics, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.nx = nx
        self.layer_id = layer_id
        self.hashed = layer_id < cfg.num_hash_layers
        self.n_experts = cfg.n_routed_experts
        self.gate = Gate(nx, cfg, self.hashed)
        self.experts = RoutedExperts(nx, cfg)
        self.shared_experts = SharedExpert(nx, cfg)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, trace: dict | None = None):
        """x [B, T, D] (ffn_norm output), ids [B, T] -> (y [B, T, D], load [E] or None)."""
        b, t, d = x.shape
        xf = x.reshape(-1, d)
        idx, w = self.gate(xf, ids.reshape(-1))
        y = self.experts(self.nx.act(xf), idx, w) + self.shared_experts(xf)
        if trace is not None:
            trace.setdefault("expert_ids", {})[self.layer_id] = idx.sort(-1).values.view(b, t, -1)
        load = None
        if not self.hashed:
            load = torch.bincount(idx.reshape(-1), minlength=self.n_experts)
        return self.nx.bf16(y).view(b, t, d), load
