"""Attention of a V4 block: sliding window + attention sink, with a compressed KV
stream on CSA (ratio 4, lightning-indexer top-k) and HCA (ratio 128, all entries)
layers; grouped low-rank output projection.

Index set of query i (prefill from position 0): raw positions max(0, i-W+1) .. i, then
compressed entries t with t < (i+1) // ratio (CSA: the indexer's top-k of those).  The
compressed entries and the index set are the same in both numerics; only the attention
kernel differs:

  ref    the reference kernel: the list [window (oldest first) | compressed (indexer
         order)] walked in blocks of 64 with a running max, probabilities rounded to BF16
         for P.V only, the sink added to the denominator after the loop;
  train  one softmax over [window keys | compressed keys | sink] computed densely per
         chunk of W queries (keys: the previous and the current chunk) with masks,
         vectorised over batch, heads and chunks.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import ModelConfig
from .layers import Bf16Linear, F32Linear, Fp8Linear, RMSNorm, tag
from .numerics import Numerics
from .quant import bf16_round
from .rope import RopeTable, apply_rope

NEG_INF = float("-inf")
KERNEL_BLOCK = 64


def fp32_const(v: float) -> float:
    """A Python double rounded to FP32 (the reference's scalar constants)."""
    return float(torch.tensor(v, dtype=torch.float32))


class Compressor(nn.Module):
    """Pools `ratio` tokens into one entry: per-channel softmax over the gate scores
    (+ position embedding `ape`), weighted sum of the projected values.  Ratio 4 is
    overlapping: entry b mixes the first halves of block b-1 and the second halves of
    block b (8 tokens).  Then BF16 -> RMSNorm -> RoPE at position ratio*b -> QAT
    (attention: FP8 on the non-RoPE dims; indexer: Hadamard + FP4)."""

    def __init__(self, nx: Numerics, cfg: ModelConfig, dim: int, ratio: int, for_indexer: bool):
        super().__init__()
        self.nx, self.dim, self.ratio, self.for_indexer = nx, dim, ratio, for_indexer
        self.overlap = ratio == 4
        width = (2 if self.overlap else 1) * dim
        self.rope_dim = cfg.qk_rope_head_dim
        self.wkv = F32Linear(nx, cfg.hidden_size, width)
        self.wgate = F32Linear(nx, cfg.hidden_size, width)
        self.ape = tag(nn.Parameter(torch.zeros(ratio, width)), "f32")
        self.norm = RMSNorm(nx, dim, cfg.rms_norm_eps)

    def forward(self, x: torch.Tensor, rope: RopeTable) -> torch.Tensor:
        """x [B, T, D] -> entries [B, T // ratio, dim] (complete blocks only)."""
        b, t, _ = x.shape
        r, d = self.ratio, self.dim
        n = t // r
        if n == 0:
            return x.new_zeros(b, 0, d)
        xs = x[:, :n * r]
        kv = self.wkv(xs).view(b, n, r, -1)
        sc = self.wgate(xs).view(b, n, r, -1) + self.ape
        if self.overlap:
            kv_a, kv_b = kv.split(d, dim=-1)
            sc_a, sc_b = sc.split(d, dim=-1)
            # Block b takes the first halves of block b-1 (none for b = 0: weight 0).
            kv_a = F.pad(kv_a, (0, 0, 0, 0, 1, 0))[:, :n]
            sc_a = F.pad(sc_a, (0, 0, 0, 0, 1, 0), value=NEG_INF)[:, :n]
            kv = torch.cat((kv_a, kv_b), dim=2)
            sc = torch.cat((sc_a, sc_b), dim=2)
        c = (kv * torch.softmax(sc, dim=2)).sum(2)
        c = self.norm(self.nx.bf16(c))
        cos, sin = rope.tables(n, d, r)
        c = apply_rope(c, cos, sin, self.nx)
        if self.for_indexer:
            return self.nx.index_qat(c)
        return self.nx.kv_qat(c, self.rope_dim)


def visible_mask(t: int, n: int, ratio: int, device=None) -> torch.Tensor:
    """[t, n] bool: compressed entry j is visible to query i iff j < (i + 1) // ratio."""
    i = torch.arange(t, device=device).unsqueeze(1)
    return torch.arange(n, device=device).unsqueeze(0) < (i + 1) // ratio


def select_topk(score: torch.Tensor, visible: torch.Tensor, k: int) -> torch.Tensor:
    """[B, T, n] scores -> [B, T, k] entry ids by descending score, ties by ascending id
    (a stable sort); invisible selections are -1 (they sort last)."""
    s = score.detach().masked_fill(~visible, NEG_INF)
    vals, order = torch.sort(s, dim=-1, descending=True, stable=True)
    idx = order[..., :k]
    return idx.masked_fill(vals[..., :k] == NEG_INF, -1)


class Indexer(nn.Module):
    """Lightning indexer of CSA layers: score_t = sum_h relu(q_h . k_t) * w_h over the
    indexer's own compressed keys; the top-k entries are what the attention reads."""

    def __init__(self, nx: Numerics, cfg: ModelConfig):
        super().__init__()
        self.nx = nx
        self.heads, self.dim = cfg.index_n_heads, cfg.index_head_dim
        self.topk = cfg.index_topk
        self.wq_b = Fp8Linear(nx, cfg.q_lora_rank, self.heads * self.dim)
        self.weights_proj = Bf16Linear(nx, cfg.hidden_size, self.heads)
        self.compressor = Compressor(nx, cfg, self.dim, 4, for_indexer=True)
        self.weight_scale = fp32_const(self.dim ** -0.5 * self.heads ** -0.5)

    def forward(self, x: torch.Tensor, qr: torch.Tensor, rope: RopeTable) -> torch.Tensor:
        """Scores [B, T, T // 4] (FP32 in train; the reference's BF16 values in ref)."""
        nx = self.nx
        b, t, _ = x.shape
        q = self.wq_b(qr).view(b, t, self.heads, self.dim)
        cos, sin = rope.tables(t, self.dim)
        q = nx.index_qat(apply_rope(q, cos.unsqueeze(1), sin.unsqueeze(1), nx))
        k = self.compressor(x, rope)
        w = nx.bf16(self.weights_proj(x) * self.weight_scale)
        return indexer_scores(q, k, w, nx)


def indexer_scores(q: torch.Tensor, k: torch.Tensor, w: torch.Tensor, nx: Numerics):
    """q [B, T, H, d], keys k [B, N, d], head weights w [B, T, H] -> [B, T, N]:
    sum_h relu(q_h . k) * w_h (ref: BF16 dot, BF16 term, BF16 sum)."""
    b, t, h, d = q.shape
    dots = nx.bf16(nx.matmul(q.reshape(b, t * h, d), k.transpose(1, 2))).view(b, t, h, -1)
    if nx.ref:
        return nx.bf16(nx.bf16(F.relu(dots) * w.unsqueeze(-1)).sum(2))
    return nx.matmul(w.unsqueeze(-2), F.relu(dots)).squeeze(-2)


def sparse_attn_ref(q, kv_all, idx, sink, scale: float) -> torch.Tensor:
    """The reference kernel.  q [B, T, H, d], kv_all [B, N, d], idx [B, T, L] rows of
    kv_all (-1 = padding), sink [H] -> o [B, T, H, d] (BF16 values)."""
    b, t, h, d = q.shape
    L = idx.shape[-1]
    pad = (-L) % KERNEL_BLOCK
    if pad:
        idx = F.pad(idx, (0, pad), value=-1)
    m = torch.full((b, t, h), NEG_INF)
    z = torch.zeros(b, t, h)
    acc = torch.zeros(b, t, h, d)
    batch = torch.arange(b).view(b, 1, 1)
    for s in range(0, idx.shape[-1], KERNEL_BLOCK):
        ib = idx[..., s:s + KERNEL_BLOCK]
        valid = ib >= 0
        kvb = kv_all[batch, ib.clamp(min=0)] * valid.unsqueeze(-1)        # [B, T, 64, d]
        logits = torch.matmul(q, kvb.transpose(-1, -2)) * scale            # [B, T, H, 64]
        logits = logits.masked_fill(~valid.unsqueeze(2), NEG_INF)
        m_new = torch.maximum(m, logits.amax(-1))
        finite = torch.isfinite(m_new)
        alpha = torch.where(torch.isfinite(m), torch.exp(m - m_new), torch.zeros_like(m))
        p = torch.exp(logits - torch.where(finite, m_new, torch.zeros_like(m_new)).unsqueeze(-1))
        p = p.masked_fill(~valid.unsqueeze(2), 0.0)
        z = z * alpha + p.sum(-1)
        acc = acc * alpha.unsqueeze(-1) + torch.matmul(bf16_round(p), kvb)
        m = m_new
    z = z + torch.exp(sink - m)
    return bf16_round(acc / z.unsqueeze(-1))


def ref_index_lists(t: int, window: int, ratio: int, n: int, topk: torch.Tensor | None,
                    batch: int) -> torch.Tensor:
    """The reference's prefill list per query: [window part (width min(T, W), oldest
    first, -1 after the query) | compressed part offset by T]."""
    i = torch.arange(t).unsqueeze(1)
    win = (i - window + 1).clamp(min=0) + torch.arange(min(t, window)).unsqueeze(0)
    win = win.masked_fill(win > i, -1).expand(batch, t, -1)
    if ratio == 0:
        return win
    if ratio == 4:
        comp = torch.where(topk >= 0, topk + t, topk)
    else:
        j = torch.arange(n).unsqueeze(0)
        comp = torch.where(j < (i + 1) // ratio, j + t, torch.full_like(j, -1))
        comp = comp.expand(batch, t, -1)
    return torch.cat((win, comp), dim=-1)


def attend_train(q, kv, ckv, comp_mask, sink, window: int, scale: float, mm=torch.matmul):
    """Differentiable sparse attention.  q [B, T, H, d], kv [B, T, d], ckv [B, n, d] or
    None, comp_mask [B, T, n] bool (entries this query attends), sink [H].  Returns
    (o [B, T, H, d], dense) where dense (no gradient, None without compressed entries)
    is (compressed logits [B, T, H, n] before comp_mask, logsumexp [B, T, H] of the
    window logits and the sink): what the indexer's training target is built from.
    mm computes the four matrix products (Numerics.matmul: FP32 or BF16 operands)."""
    b, t, h, d = q.shape
    c = window if t > window else t                # chunk of queries; C >= W or one chunk
    nchunk = -(-t // c)
    tp = nchunk * c
    if tp != t:
        q = F.pad(q, (0, 0, 0, 0, 0, tp - t))
        kv = F.pad(kv, (0, 0, 0, tp - t))
    qc = q.reshape(b, nchunk, c * h, d)
    kvp = F.pad(kv, (0, 0, c, 0))                   # a zero chunk before the first
    keys = torch.cat((kvp[:, :tp].view(b, nchunk, c, d), kvp[:, c:].view(b, nchunk, c, d)), 2)
    win = mm(qc, keys.transpose(-1, -2)) * scale + _window_bias(nchunk, c, h, window)
    sinks = sink.repeat(c).view(1, 1, c * h, 1).expand(b, nchunk, -1, -1)
    logits = [win]
    comp = None
    if ckv is not None and ckv.shape[1] > 0:
        ck = ckv.unsqueeze(1)
        comp = mm(qc, ck.transpose(-1, -2)) * scale             # [B, n, C*H, N]
        mask = comp_mask
        if tp != t:
            mask = F.pad(mask, (0, 0, 0, tp - t))
        mask = mask.view(b, nchunk, c, 1, -1).expand(-1, -1, -1, h, -1).reshape(comp.shape)
        logits.append(comp.masked_fill(~mask, NEG_INF))
    logits.append(sinks)
    p = torch.softmax(torch.cat(logits, dim=-1), dim=-1)
    parts = p.split([2 * c] + ([ck.shape[-2]] if comp is not None else []) + [1], dim=-1)
    o = mm(parts[0], keys)
    dense = None
    if comp is not None:
        o = o + mm(parts[1], ck)
        with torch.no_grad():
            lse = torch.logsumexp(torch.cat((win, sinks), dim=-1), dim=-1)
            dense = (comp.view(b, tp, h, -1)[:, :t], lse.view(b, tp, h)[:, :t])
    return o.view(b, tp, h, d)[:, :t], dense


_BIAS_CACHE: dict = {}


def _window_bias(nchunk: int, c: int, h: int, window: int) -> torch.Tensor:
    """[n, C*H, 2C] additive mask: query c*C+a sees key (c-1)*C+b iff it is in its
    window (i - W < j <= i) and j >= 0."""
    key = (nchunk, c, h, window)
    if key not in _BIAS_CACHE:
        a = torch.arange(c).view(1, c, 1)
        bb = torch.arange(2 * c).view(1, 1, 2 * c)
        ch = torch.arange(nchunk).view(nchunk, 1, 1)
        i = ch * c + a
        j = (ch - 1) * c + bb
        ok = (j <= i) & (j > i - window) & (j >= 0)
        bias = torch.zeros(ok.shape).masked_fill(~ok, NEG_INF)
        if len(_BIAS_CACHE) > 16:
            _BIAS_CACHE.clear()
        _BIAS_CACHE[key] = bias.repeat_interleave(h, dim=1)
    return _BIAS_CACHE[key]


def indexer_target(comp_logits, lse_window_sink, visible) -> torch.Tensor:
    """The attention distribution the indexer learns to predict, [B, T, n]: per head the
    probability the main attention gives each visible compressed entry when it attends
    to all of them (normalized with the window and the sink), summed over heads and
    L1-normalised over the entries."""
    vis = visible.view(1, visible.shape[0], 1, -1)
    comp = comp_logits.masked_fill(~vis, NEG_INF)
    lse = torch.logaddexp(lse_window_sink, torch.logsumexp(comp, dim=-1))
    p = torch.exp(comp - lse.unsqueeze(-1)).sum(2)
    return p / p.sum(-1, keepdim=True).clamp(min=1e-30)


def indexer_kl(index_score, target, visible) -> torch.Tensor:
    """KL(target || softmax(index_score)) over the visible compressed entries, averaged
    over the queries that see at least one entry (target carries no gradient)."""
    rows = visible.any(-1)
    if not bool(rows.any()):
        return index_score.sum() * 0.0
    vis = visible.unsqueeze(0)
    logp = torch.log_softmax(index_score.masked_fill(~vis, NEG_INF), -1)
    keep = vis & (target > 0)
    safe_logp = torch.where(keep, logp, torch.zeros_like(logp))
    log_t = torch.log(torch.where(keep, target, torch.ones_like(target)))
    kl = torch.where(keep, target * (log_t - safe_logp), torch.zeros_like(logp)).sum(-1)
    return kl[:, rows].mean()


class Attention(nn.Module):
    def __init__(self, nx: Numerics, cfg: ModelConfig, layer_id: int):
        super().__init__()
        self.nx = nx
        self.layer_id = layer_id
        self.ratio = cfg.compress_ratios[layer_id]
        self.heads, self.head_dim = cfg.num_attention_heads, cfg.head_dim
        self.rope_dim = cfg.qk_rope_head_dim
        self.window = cfg.sliding_window
        self.groups, self.o_rank = cfg.o_groups, cfg.o_lora_rank
        self.eps = cfg.rms_norm_eps
        self.topk = cfg.index_topk
        self.scale = fp32_const(self.head_dim ** -0.5)
        d = cfg.hidden_size
        self.wq_a = Fp8Linear(nx, d, cfg.q_lora_rank)
        self.q_norm = RMSNorm(nx, cfg.q_lora_rank, self.eps)
        self.wq_b = Fp8Linear(nx, cfg.q_lora_rank, self.heads * self.head_dim)
        self.wkv = Fp8Linear(nx, d, self.head_dim)
        self.kv_norm = RMSNorm(nx, self.head_dim, self.eps)
        group_in = self.heads * self.head_dim // self.groups
        self.wo_a = tag(nn.Parameter(torch.empty(self.groups * self.o_rank, group_in)), "fp8")
        self.wo_b = Fp8Linear(nx, self.groups * self.o_rank, d)
        self.attn_sink = tag(nn.Parameter(torch.zeros(self.heads)), "f32")
        if self.ratio:
            self.compressor = Compressor(nx, cfg, self.head_dim, self.ratio, for_indexer=False)
        if self.ratio == 4:
            self.indexer = Indexer(nx, cfg)
        if self.ratio:
            self.rope = RopeTable(self.rope_dim, cfg.compress_rope_theta, cfg.rope_scaling)
        else:
            self.rope = RopeTable(self.rope_dim, cfg.rope_theta, None)

    def forward(self, x: torch.Tensor, trace: dict | None = None):
        """x [B, T, D] (attn_norm output) -> (out [B, T, D], indexer KL or None)."""
        nx = self.nx
        b, t, _ = x.shape
        cos, sin = self.rope.tables(t, self.head_dim)
        qr = self.q_norm(self.wq_a(x))
        q = self.wq_b(qr).view(b, t, self.heads, self.head_dim)
        q = apply_rope(nx.head_rms(q, self.eps), cos.unsqueeze(1), sin.unsqueeze(1), nx)
        kv = apply_rope(self.kv_norm(self.wkv(x)), cos, sin, nx)
        kv = nx.kv_qat(kv, self.rope_dim)

        ckv, topk, visible, score = None, None, None, None
        if self.ratio:
            ckv = self.compressor(x, self.rope)
            visible = visible_mask(t, ckv.shape[1], self.ratio)
        if self.ratio == 4 and ckv.shape[1] > 0:
            # Selection is not differentiable; the indexer learns only from its KL term,
            # on inputs detached from the language-model graph.
            score = self.indexer(x.detach(), qr.detach(), self.rope)
            topk = select_topk(score, visible, min(self.topk, ckv.shape[1]))
            if trace is not None:
                trace.setdefault("indexer_topk", {})[self.layer_id] = topk
        if self.ratio == 4 and ckv.shape[1] == 0:
            ckv = None

        kl = None
        if nx.ref:
            n = 0 if ckv is None else ckv.shape[1]
            idx = ref_index_lists(t, self.window, self.ratio if n else 0, n, topk, b)
            kv_all = kv if ckv is None else torch.cat((kv, ckv), dim=1)
            o = sparse_attn_ref(q, kv_all, idx, self.attn_sink, self.scale)
        else:
            mask = None
            if ckv is not None:
                mask = visible.unsqueeze(0).expand(b, -1, -1)
                if topk is not None:
                    sel = torch.zeros(b, t, ckv.shape[1] + 1, dtype=torch.bool)
                    sel.scatter_(2, topk.clamp(min=-1) % (ckv.shape[1] + 1), True)
                    mask = sel[..., :-1] & mask
            o, dense = attend_train(q, kv, ckv, mask, self.attn_sink, self.window, self.scale,
                                    nx.matmul)
            if score is not None:
                kl = indexer_kl(score, indexer_target(*dense, visible), visible)

        o = apply_rope(o, cos.unsqueeze(1), sin.unsqueeze(1), nx, inverse=True)
        o = o.reshape(b, t, self.groups, -1)
        wo_a = nx.fp8_weight(self.wo_a).view(self.groups, self.o_rank, -1)
        if nx.bf16_matmul:
            z = torch.einsum("btgi,goi->btgo", o.bfloat16(), wo_a.bfloat16()).float()
        else:
            z = nx.bf16(torch.einsum("btgi,goi->btgo", o, wo_a))
        return self.wo_b(z.flatten(2)), kl
