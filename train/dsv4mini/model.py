"""DeepSeek-V4 transformer (the architecture of DeepSeek-V4-Flash at any size).

    tokens -> embed -> hc identical streams -> blocks -> hc_head -> norm -> head
    MTP: (h_q, token q+1) -> e_proj(enorm(embed)) + h_proj(hnorm(h)) -> its own block
         -> its own hc_head and norm -> the shared head  (predicts token q+2)

A block: streams -> hc_pre -> attn_norm -> attention -> hc_post -> hc_pre -> ffn_norm
-> MoE -> hc_post.  Full sequences only (a prefill from position 0), batched.

Numerics (see numerics.py): "ref" reproduces the reference's rounding points for golden
checks; "train" is the same computation in FP32 and differentiable, optionally with
quantization-aware fake quantization (qat=True).  Parameter names equal the checkpoint
names except the stacked routed experts (checkpoint.py maps them).
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .attention import Attention
from .config import ModelConfig
from .layers import Fp8Linear, RMSNorm, tag
from .mhc import hc_head, hc_post, hc_pre
from .moe import MoE
from .numerics import Numerics


class Block(nn.Module):
    def __init__(self, nx: Numerics, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.nx, self.cfg, self.layer_id = nx, cfg, layer_id
        mix, width = cfg.hc_mix, cfg.hc_mult * cfg.hidden_size
        for part in ("attn", "ffn"):
            setattr(self, f"hc_{part}_fn", tag(nn.Parameter(torch.empty(mix, width)), "f32"))
            setattr(self, f"hc_{part}_base", tag(nn.Parameter(torch.zeros(mix)), "f32"))
            setattr(self, f"hc_{part}_scale", tag(nn.Parameter(torch.ones(3)), "f32"))
        self.attn_norm = RMSNorm(nx, cfg.hidden_size, cfg.rms_norm_eps)
        self.ffn_norm = RMSNorm(nx, cfg.hidden_size, cfg.rms_norm_eps)
        self.attn = Attention(nx, cfg, layer_id)
        self.ffn = MoE(nx, cfg, layer_id)

    def _pre(self, part: str, x: torch.Tensor):
        c = self.cfg
        return hc_pre(x, getattr(self, f"hc_{part}_fn"), getattr(self, f"hc_{part}_scale"),
                      getattr(self, f"hc_{part}_base"), c.hc_mult, c.hc_sinkhorn_iters,
                      c.rms_norm_eps, c.hc_eps, self.nx)

    def forward(self, x: torch.Tensor, ids: torch.Tensor, trace: dict | None = None):
        """x [B, T, hc, D] streams, ids [B, T] -> (streams, indexer KL, expert load)."""
        a, post, comb = self._pre("attn", x)
        f, kl = self.attn(self.attn_norm(a), trace)
        x = hc_post(f, x, post, comb, self.nx)
        a, post, comb = self._pre("ffn", x)
        f, load = self.ffn(self.ffn_norm(a), ids, trace)
        return hc_post(f, x, post, comb, self.nx), kl, load


class MTPBlock(Block):
    """The multi-token-prediction block: its own input projections, block, hc_head and
    norm; embed and head are the main model's."""

    def __init__(self, nx: Numerics, cfg: ModelConfig, layer_id: int):
        super().__init__(nx, cfg, layer_id)
        d = cfg.hidden_size
        self.e_proj = Fp8Linear(nx, d, d)
        self.h_proj = Fp8Linear(nx, d, d)
        self.enorm = RMSNorm(nx, d, cfg.rms_norm_eps)
        self.hnorm = RMSNorm(nx, d, cfg.rms_norm_eps)
        self.norm = RMSNorm(nx, d, cfg.rms_norm_eps)
        self.hc_head_fn = tag(nn.Parameter(torch.empty(cfg.hc_mult, cfg.hc_mult * d)), "f32")
        self.hc_head_base = tag(nn.Parameter(torch.zeros(cfg.hc_mult)), "f32")
        self.hc_head_scale = tag(nn.Parameter(torch.ones(1)), "f32")

    def inputs(self, h: torch.Tensor, e: torch.Tensor) -> torch.Tensor:
        """h [B, T, hc, D] main streams, e [B, T, D] embeddings of the next tokens."""
        x = self.e_proj(self.enorm(e)).unsqueeze(-2) + self.h_proj(self.hnorm(h))
        return self.nx.bf16(x)


class Transformer(nn.Module):
    def __init__(self, cfg: ModelConfig, numerics: str = "train", qat: bool = False,
                 seed: int | None = 0):
        super().__init__()
        cfg.validate()
        self.cfg = cfg
        self.nx = Numerics(numerics, qat)
        nx, d = self.nx, cfg.hidden_size
        self.embed = nn.Embedding(cfg.vocab_size, d)
        self.embed.weight.ckpt_format = "bf16"
        self.layers = nn.ModuleList(Block(nx, cfg, i) for i in range(cfg.num_hidden_layers))
        self.norm = RMSNorm(nx, d, cfg.rms_norm_eps)
        self.head = nn.Linear(d, cfg.vocab_size, bias=False)
        self.head.weight.ckpt_format = "bf16"
        self.hc_head_fn = tag(nn.Parameter(torch.empty(cfg.hc_mult, cfg.hc_mult * d)), "f32")
        self.hc_head_base = tag(nn.Parameter(torch.zeros(cfg.hc_mult)), "f32")
        self.hc_head_scale = tag(nn.Parameter(torch.ones(1)), "f32")
        self.mtp = nn.ModuleList(MTPBlock(nx, cfg, cfg.num_hidden_layers + i)
                                 for i in range(cfg.num_nextn_predict_layers))
        if seed is not None:
            self.init_weights(seed)

    # ---- numerics ------------------------------------------------------------------
    def set_numerics(self, numerics: str, qat: bool = False, bf16_matmul: bool = False) -> None:
        """Switches every module at once (they share one Numerics object)."""
        new = Numerics(numerics, qat, bf16_matmul)
        self.nx.mode, self.nx.qat, self.nx.bf16_matmul = new.mode, new.qat, new.bf16_matmul

    def set_qat(self, qat: bool) -> None:
        """Turns fake quantization on or off (numerics='train' only)."""
        self.set_numerics(self.nx.mode, bool(qat), self.nx.bf16_matmul)

    def set_bf16_matmul(self, on: bool) -> None:
        """Mixed-precision matrix products (numerics='train' only; see numerics.py)."""
        self.set_numerics(self.nx.mode, self.nx.qat, bool(on))

    def biased_gate_layers(self) -> list[int]:
        """Layer ids (the MTP block = num_hidden_layers + i) of the bias-routed gates, in
        the order of forward()'s expert_load list."""
        n = self.cfg.num_hidden_layers
        return [i for i in range(self.cfg.num_hash_layers, n)] + \
            [n + i for i in range(len(self.mtp))]

    # ---- initialization --------------------------------------------------------------
    @torch.no_grad()
    def init_weights(self, seed: int = 0) -> None:
        """Random initialization for training from scratch (deterministic in `seed`)."""
        cfg = self.cfg
        g = torch.Generator().manual_seed(seed)
        out_scale = 1.0 / math.sqrt(2 * (cfg.num_hidden_layers + cfg.num_nextn_predict_layers))

        def normal(p, std):
            p.copy_(torch.randn(p.shape, generator=g) * std)

        for name, p in self.named_parameters():
            leaf = name.rsplit(".", 1)[-1]
            fan_in = p.shape[-1]
            if name == "embed.weight":
                normal(p, 1.0)
            elif name == "head.weight":
                normal(p, 0.5 / math.sqrt(fan_in))
            elif leaf.endswith("_fn"):
                normal(p, 0.1 / math.sqrt(fan_in))
            elif leaf.endswith("_scale") and leaf.startswith("hc_"):
                p.fill_(1.0)
            elif leaf.endswith("_base") and leaf.startswith("hc_"):
                hc = cfg.hc_mult
                # pre = 1/hc per stream, post = 1, comb starting near the identity.
                p.zero_()
                p[:hc] = -math.log(hc - 1) if hc > 1 else 4.0
                if p.numel() > hc:
                    p[2 * hc:].view(hc, hc).fill_diagonal_(2.0)
            elif name.endswith("norm.weight"):
                p.fill_(1.0)
            elif leaf in ("attn_sink", "ape"):
                p.zero_()
            elif ".wo_b." in name or ".w2" in name:
                normal(p, out_scale / math.sqrt(fan_in))
            else:
                normal(p, 1.0 / math.sqrt(fan_in))
        for mod in self.modules():
            gate = getattr(mod, "gate", None)
            if gate is not None and hasattr(gate, "tid2eid"):
                v, e = gate.tid2eid.shape
                gate.tid2eid.copy_(torch.rand(v, cfg.n_routed_experts, generator=g)
                                   .argsort(-1)[:, :e])
            elif gate is not None:
                gate.bias.zero_()

    # ---- pieces (also used by the golden tests) ------------------------------------------
    def embed_tokens(self, tokens: torch.Tensor) -> torch.Tensor:
        return self.nx.bf16(F.embedding(tokens, self.nx.bf16_weight(self.embed.weight)))

    def embed_streams(self, tokens: torch.Tensor) -> torch.Tensor:
        e = self.embed_tokens(tokens)
        return e.unsqueeze(-2).expand(*e.shape[:-1], self.cfg.hc_mult, e.shape[-1])

    def block(self, layer_id: int) -> Block:
        n = self.cfg.num_hidden_layers
        return self.layers[layer_id] if layer_id < n else self.mtp[layer_id - n]

    def run_block(self, layer_id: int, streams: torch.Tensor, tokens: torch.Tensor,
                  trace: dict | None = None) -> torch.Tensor:
        """One block on given input streams [B, T, hc, D] (prefill from position 0);
        layer_id == num_hidden_layers is the MTP block (its inner block only)."""
        return self.block(layer_id)(streams, tokens, trace)[0]

    def head_logits(self, streams, fn, scale, base, norm: RMSNorm) -> torch.Tensor:
        c = self.cfg
        y = norm(hc_head(streams, fn, scale, base, c.rms_norm_eps, c.hc_eps, self.nx))
        return self.nx.linear(y, self.nx.bf16_weight(self.head.weight))

    def mtp_logits(self, h: torch.Tensor, next_tokens: torch.Tensor, trace: dict | None = None,
                   depth: int = 0):
        """h [B, T, hc, D] main streams at positions 0..T-1, next_tokens [B, T] the tokens
        at positions 1..T -> (logits [B, T, V] predicting positions 2..T+1, KL, load)."""
        m = self.mtp[depth]
        x = m.inputs(h, self.embed_tokens(next_tokens))
        x, kl, load = m(x, next_tokens, trace)
        return self.head_logits(x, m.hc_head_fn, m.hc_head_scale, m.hc_head_base, m.norm), \
            kl, load

    # ---- forward ---------------------------------------------------------------------
    def forward(self, tokens: torch.Tensor, return_streams: bool = False, mtp: bool = True):
        """tokens [B, T] -> dict: logits [B, T, V]; mtp_logits [B, T-1, V] (row q from h_q
        and token q+1, predicting token q+2); indexer_loss (scalar); expert_load
        [per bias-routed layer: tokens per expert [E]] in the order of
        biased_gate_layers() (the MTP entry only when mtp ran); expert_load_layers the
        matching layer ids; with return_streams
        also streams [L][B, T, hc, D] (every block's output), indexer_topk
        {layer: [B, T, k]} and expert_ids {layer: [B, T, k] ascending}."""
        if tokens.dim() != 2:
            raise ValueError(f"tokens must be [B, T], got shape {tuple(tokens.shape)}")
        if tokens.numel() and (int(tokens.min()) < 0 or int(tokens.max()) >= self.cfg.vocab_size):
            raise ValueError(f"token ids must be in [0, {self.cfg.vocab_size})")
        trace = {} if return_streams else None
        kls, loads, streams = [], {}, []
        x = self.embed_streams(tokens)
        for layer in self.layers:
            x, kl, load = layer(x, tokens, trace)
            if kl is not None:
                kls.append(kl)
            if load is not None:
                loads[layer.layer_id] = load
            if return_streams:
                streams.append(x)
        out = {"logits": self.head_logits(x, self.hc_head_fn, self.hc_head_scale,
                                          self.hc_head_base, self.norm)}
        if mtp and len(self.mtp) and tokens.shape[1] > 1:
            logits, kl, load = self.mtp_logits(x[:, :-1], tokens[:, 1:], trace)
            out["mtp_logits"] = logits
            if load is not None:
                loads[self.mtp[0].layer_id] = load
        out["indexer_loss"] = (torch.stack(kls).mean() if kls
                               else out["logits"].new_zeros(()))
        out["expert_load_layers"] = sorted(loads)
        out["expert_load"] = [loads[k] for k in out["expert_load_layers"]]
        if return_streams:
            out["streams"] = streams
            out["indexer_topk"] = trace.get("indexer_topk", {})
            out["expert_ids"] = trace.get("expert_ids", {})
        return out

    # ---- auxiliary-loss-free balancing -----------------------------------------------
    @torch.no_grad()
    def update_gate_bias(self, expert_load, rate: float) -> None:
        """bias += rate * sign(mean load - load) per bias-routed layer: DeepSeek's
        auxiliary-loss-free balancing (the bias only steers selection, never the routing
        weights).  expert_load: forward()'s list (biased_gate_layers() order, possibly
        without the MTP entry) or a dict {layer id: tokens per expert}."""
        if not isinstance(expert_load, dict):
            expert_load = list(expert_load)
            layers = self.biased_gate_layers()
            if len(expert_load) > len(layers):
                raise ValueError(f"{len(expert_load)} loads for {len(layers)} biased gates")
            expert_load = dict(zip(layers, expert_load))
        for layer_id, load in expert_load.items():
            gate = self.block(int(layer_id)).ffn.gate
            if gate.hashed:
                raise ValueError(f"layer {layer_id} routes by token id; it has no gate bias")
            load = torch.as_tensor(load, dtype=torch.float32)
            if load.shape != gate.bias.shape:
                raise ValueError(f"layer {layer_id}: load shape {tuple(load.shape)}, expected "
                                 f"{tuple(gate.bias.shape)}")
            gate.bias += rate * torch.sign(load.mean() - load)
