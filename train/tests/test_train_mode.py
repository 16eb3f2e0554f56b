"""numerics='train' (and qat): differentiable FP32 forward of the same architecture."""

import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

import torch  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from dsv4mini import ModelConfig, Transformer  # noqa: E402
from dsv4mini import quant as Q  # noqa: E402
from dsv4mini.attention import (attend_train, indexer_kl, indexer_target,  # noqa: E402
                                sparse_attn_ref, visible_mask)
from dsv4mini.checkpoint import load_checkpoint  # noqa: E402
from dsv4mini.golden import load_golden  # noqa: E402


def tiny_config(**kw) -> ModelConfig:
    with open(os.path.join(util.TINY_A, "config.json")) as f:
        d = json.load(f)
    d.update(vocab_size=96, hidden_size=128, num_hidden_layers=3, num_attention_heads=2,
             compress_ratios=[0, 4, 128, 0], num_hash_layers=1, sliding_window=8,
             q_lora_rank=128, o_groups=1, o_lora_rank=128, index_n_heads=2, index_topk=4,
             n_routed_experts=4, num_experts_per_tok=2, moe_intermediate_size=128)
    d.update(kw)
    return ModelConfig.from_dict(d).validate()


def lm_losses(out, tokens):
    v = out["logits"].shape[-1]
    lm = F.cross_entropy(out["logits"][:, :-1].reshape(-1, v), tokens[:, 1:].reshape(-1))
    mtp = F.cross_entropy(out["mtp_logits"][:, :-1].reshape(-1, v), tokens[:, 2:].reshape(-1))
    return lm, mtp


def brute_attention(q, kv, ckv, mask, sink, window, scale):
    """Per query, in float64: softmax over [window keys, selected entries, sink]."""
    b, t, h, d = q.shape
    o = torch.zeros(b, t, h, d, dtype=torch.float64)
    for bi in range(b):
        for i in range(t):
            keys = [kv[bi, j] for j in range(max(0, i - window + 1), i + 1)]
            if ckv is not None:
                keys += [ckv[bi, j] for j in range(ckv.shape[1]) if mask[bi, i, j]]
            k = torch.stack(keys).double()
            for hh in range(h):
                s = (k @ q[bi, i, hh].double()) * scale
                e = torch.exp(torch.cat((s, sink[hh:hh + 1].double())) - s.max())
                o[bi, i, hh] = (e[:-1] / e.sum()) @ k
    return o


class AttentionKernelTest(unittest.TestCase):
    def test_train_and_ref_kernels_match_brute_force(self):
        for t, w in ((21, 6), (5, 6), (24, 8)):     # partial chunk, T < W, whole chunks
            with self.subTest(t=t, w=w):
                self.check_kernels(t, w)

    def check_kernels(self, t, w):
        gen = torch.Generator().manual_seed(3)
        b, h, d = 2, 3, 16
        n = t // 4
        q = torch.randn(b, t, h, d, generator=gen)
        kv = torch.randn(b, t, d, generator=gen)
        ckv = torch.randn(b, n, d, generator=gen)
        mask = (torch.rand(b, t, n, generator=gen) < 0.5) & visible_mask(t, n, 4)
        sink = torch.randn(h, generator=gen)
        want = brute_attention(q, kv, ckv, mask, sink, w, 0.25)
        got, _ = attend_train(q, kv, ckv, mask, sink, w, 0.25)
        self.assertLess((got.double() - want).abs().max().item(), 1e-5)
        # The reference kernel on the same index lists (window | selected, -1 padded).
        i = torch.arange(t)[:, None]
        win = (i - w + 1).clamp(min=0) + torch.arange(w)[None]
        win = win.masked_fill(win > i, -1).expand(b, t, w)
        comp = torch.where(mask, torch.arange(n) + t, torch.full_like(mask, -1, dtype=torch.long))
        ref = sparse_attn_ref(q, torch.cat((kv, ckv), 1), torch.cat((win, comp), -1), sink, 0.25)
        self.assertLess((ref.double() - want).abs().max().item(), 2e-2)

    def test_indexer_target_and_kl(self):
        """Target: per head, the dense attention's probability of each visible compressed
        entry (window and sink in the normalizer), summed over heads, L1-normalised."""
        gen = torch.Generator().manual_seed(4)
        b, t, h, d, w = 1, 19, 2, 8, 5
        n = t // 4
        q = torch.randn(b, t, h, d, generator=gen)
        kv = torch.randn(b, t, d, generator=gen)
        ckv = torch.randn(b, n, d, generator=gen)
        sink = torch.randn(h, generator=gen)
        vis = visible_mask(t, n, 4)
        sel = vis & (torch.arange(n) % 2 == 0)          # attends only some entries
        _, dense = attend_train(q, kv, ckv, sel.unsqueeze(0), sink, w, 0.3)
        target = indexer_target(*dense, vis)[0]
        for i in range(t):
            if not vis[i].any():
                continue
            keys = torch.cat((kv[0, max(0, i - w + 1):i + 1], ckv[0, vis[i]]))
            p = torch.zeros(int(vis[i].sum()))
            for hh in range(h):
                s = torch.cat(((keys @ q[0, i, hh]) * 0.3, sink[hh:hh + 1]))
                p += torch.softmax(s, 0)[-1 - p.numel():-1]
            self.assertTrue(torch.allclose(target[i, vis[i]], p / p.sum(), atol=1e-6), i)
            self.assertEqual(float(target[i, ~vis[i]].abs().sum()), 0.0)
        score = torch.log(target.clamp(min=1e-30))[None]
        self.assertLess(indexer_kl(score, target[None], vis).item(), 1e-6)
        self.assertGreater(indexer_kl(torch.zeros_like(score), target[None], vis).item(), 1e-3)


class TrainModeTest(unittest.TestCase):
    def setUp(self):
        self.cfg = tiny_config()
        gen = torch.Generator().manual_seed(5)
        self.tokens = torch.randint(0, self.cfg.vocab_size, (2, 160), generator=gen)

    def test_output_shapes(self):
        m = Transformer(self.cfg, numerics="train", seed=1)
        out = m(self.tokens, return_streams=True)
        b, t = self.tokens.shape
        self.assertEqual(out["logits"].shape, (b, t, 96))
        self.assertEqual(out["mtp_logits"].shape, (b, t - 1, 96))
        self.assertEqual(out["indexer_loss"].shape, ())
        self.assertEqual(out["expert_load_layers"], [1, 2, 3])
        self.assertEqual(m.biased_gate_layers(), [1, 2, 3])
        for load, rows in zip(out["expert_load"], (t, t, t - 1)):   # the MTP sees t-1 rows
            self.assertEqual(int(load.sum()), b * rows * 2)
        self.assertEqual(len(out["streams"]), 3)
        self.assertEqual(out["indexer_topk"][1].shape, (b, t, 4))
        self.assertEqual(out["expert_ids"][0].shape, (b, t, 2))
        self.assertNotIn("mtp_logits", m(self.tokens, mtp=False))
        with self.assertRaises(ValueError):
            m(torch.tensor([[0, 96]]))

    def test_loss_decreases(self):
        torch.manual_seed(0)
        m = Transformer(self.cfg, numerics="train", seed=2)
        opt = torch.optim.AdamW(m.parameters(), lr=3e-3)
        losses = []
        for _ in range(8):
            out = m(self.tokens)
            lm, mtp = lm_losses(out, self.tokens)
            loss = lm + 0.3 * mtp + 0.1 * out["indexer_loss"]
            opt.zero_grad()
            loss.backward()
            opt.step()
            m.update_gate_bias(out["expert_load"], 1e-3)
            losses.append(loss.item())
        self.assertLess(losses[-1], 0.8 * losses[0], losses)

    def test_every_parameter_gets_a_gradient(self):
        m = Transformer(self.cfg, numerics="train", seed=3)
        out = m(self.tokens)
        lm, mtp = lm_losses(out, self.tokens)
        (lm + mtp + out["indexer_loss"]).backward()
        for name, p in m.named_parameters():
            with self.subTest(param=name):
                self.assertIsNotNone(p.grad)
                self.assertTrue(torch.isfinite(p.grad).all())
                self.assertGreater(p.grad.abs().sum().item(), 0.0)
        # The hash-routing tables and gate biases are buffers: never trained by gradient.
        names = {n for n, _ in m.named_parameters()}
        self.assertNotIn("layers.0.ffn.gate.tid2eid", names)
        self.assertIn("layers.0.ffn.gate.tid2eid", dict(m.named_buffers()))

    def test_indexer_learns_only_from_its_kl_term(self):
        m = Transformer(self.cfg, numerics="train", seed=4)
        out = m(self.tokens)
        lm, mtp = lm_losses(out, self.tokens)
        self.assertGreater(out["indexer_loss"].item(), 0.0)
        indexer = {n for n, _ in m.named_parameters() if ".indexer." in n}
        self.assertTrue(indexer)
        (lm + mtp).backward(retain_graph=True)
        for n, p in m.named_parameters():
            if n in indexer:
                self.assertTrue(p.grad is None or p.grad.abs().sum() == 0, n)
        m.zero_grad(set_to_none=True)
        out["indexer_loss"].backward()
        for n, p in m.named_parameters():
            if n in indexer:
                self.assertGreater(p.grad.abs().sum().item(), 0, n)
            else:
                self.assertTrue(p.grad is None or p.grad.abs().sum() == 0, n)

    def test_causal_and_mtp_alignment(self):
        m = Transformer(self.cfg, numerics="train", seed=6)
        with torch.no_grad():
            a = m(self.tokens)
            changed = self.tokens.clone()
            j = 140
            changed[:, j] = (changed[:, j] + 1) % self.cfg.vocab_size
            b = m(changed)
        # Main logits before position j, and MTP rows q < j-1 (they read tokens <= q+1).
        self.assertTrue(torch.allclose(a["logits"][:, :j], b["logits"][:, :j], atol=1e-5))
        self.assertFalse(torch.allclose(a["logits"][:, j], b["logits"][:, j]))
        self.assertTrue(torch.allclose(a["mtp_logits"][:, :j - 1], b["mtp_logits"][:, :j - 1],
                                       atol=1e-5))
        self.assertFalse(torch.allclose(a["mtp_logits"][:, j - 1], b["mtp_logits"][:, j - 1]))

    def test_qat_fake_quantizes_and_trains(self):
        m = Transformer(self.cfg, numerics="train", qat=True, seed=7)
        w = m.layers[0].attn.wq_a.weight
        self.assertTrue(torch.equal(m.nx.fp8_weight(w).detach(), Q.fp8_weight_qdq(w)))
        e = m.layers[0].ffn.experts.w1
        self.assertTrue(torch.equal(m.nx.fp4_weight(e).detach(), Q.fp4_weight_qdq(e)))
        out = m(self.tokens)
        lm, mtp = lm_losses(out, self.tokens)
        (lm + mtp).backward()
        self.assertGreater(w.grad.abs().sum().item(), 0)
        m.set_qat(False)
        self.assertFalse(m.nx.qat)
        with self.assertRaises(ValueError):
            m.set_numerics("ref", qat=True)

    def test_bf16_matmuls_are_mixed_precision_of_the_same_network(self):
        """The fast training matmuls (BF16 operands, FP32 accumulation) change the loss by
        BF16 rounding only, give every gradient nearly the FP32 direction, and keep the
        master weights FP32; ref numerics refuse them."""
        m = Transformer(self.cfg, numerics="train", seed=9)
        grads, losses = {}, {}
        for on in (False, True):
            m.set_bf16_matmul(on)
            m.zero_grad(set_to_none=True)
            out = m(self.tokens)
            lm, mtp = lm_losses(out, self.tokens)
            loss = lm + 0.3 * mtp + 0.1 * out["indexer_loss"]
            loss.backward()
            losses[on] = loss.item()
            grads[on] = {n: p.grad.clone() for n, p in m.named_parameters()}
        self.assertTrue(m.nx.bf16_matmul)
        self.assertNotEqual(losses[True], losses[False])   # the switch does something
        self.assertLess(abs(losses[True] - losses[False]), 0.01 * losses[False], losses)
        flat = {on: torch.cat([g.flatten() for g in grads[on].values()]) for on in grads}
        self.assertGreater(F.cosine_similarity(flat[False], flat[True], dim=0).item(), 0.999)
        for n, g in grads[False].items():
            h = grads[True][n]
            self.assertEqual(h.dtype, torch.float32)
            if g.numel() < 64:      # a few scalars (mHC scales): BF16 noise can dominate
                continue
            with self.subTest(param=n):
                cos = F.cosine_similarity(g.flatten(), h.flatten(), dim=0).item()
                self.assertGreater(cos, 0.98)
        self.assertTrue(all(p.dtype == torch.float32 for p in m.parameters()))
        m.set_qat(True)
        self.assertTrue(m.nx.bf16_matmul)          # QAT keeps the matmul setting
        with self.assertRaises(ValueError):
            m.set_numerics("ref", bf16_matmul=True)

    def test_update_gate_bias(self):
        m = Transformer(self.cfg, numerics="train", seed=8)
        m.update_gate_bias([torch.tensor([10, 0, 5, 5]), torch.tensor([1, 1, 1, 1])], 0.01)
        self.assertTrue(torch.allclose(m.layers[1].ffn.gate.bias,
                                       torch.tensor([-0.01, 0.01, 0.0, 0.0])))
        self.assertTrue(torch.equal(m.layers[2].ffn.gate.bias, torch.zeros(4)))
        m.update_gate_bias({3: torch.tensor([0, 0, 0, 8])}, 0.5)
        self.assertTrue(torch.equal(m.mtp[0].ffn.gate.bias, torch.tensor([.5, .5, .5, -.5])))
        with self.assertRaises(ValueError):
            m.update_gate_bias({0: torch.zeros(4)}, 0.1)       # hash-routed layer
        with self.assertRaises(ValueError):
            m.update_gate_bias({1: torch.zeros(5)}, 0.1)


class TrainNumericsOnTinyATest(unittest.TestCase):
    def test_train_mode_is_the_same_network(self):
        """FP32 without rounding points stays within the golden end-to-end criteria
        (which are sized for gross errors) on the reference checkpoint."""
        _, m = load_checkpoint(util.TINY_A, numerics="train")
        g = load_golden(os.path.join(util.TINY_A, "golden.safetensors"))
        with torch.no_grad():
            logits = m(g["prompt300.ids"][None], mtp=False)["logits"][0]
        want = g["prefill300.logits_all"]
        rms = (logits - want).pow(2).mean().sqrt().item()
        agree = (logits.argmax(-1) == want.argmax(-1)).float().mean().item()
        self.assertLess(rms, 0.4)
        self.assertGreater(agree, 0.7)


if __name__ == "__main__":
    unittest.main()
