"""The model's building blocks in numerics='ref' against the reference's op-level
golden vectors (tests/data/golden/ops; tolerances of its README section 2)."""

import os
import sys
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

import torch  # noqa: E402

from dsv4mini import quant as Q  # noqa: E402
from dsv4mini.attention import (Compressor, fp32_const, indexer_scores, select_topk,  # noqa: E402
                                sparse_attn_ref, visible_mask)
from dsv4mini.mhc import hc_head, hc_mixes, hc_post, hc_pre  # noqa: E402
from dsv4mini.moe import MoE, RoutedExperts, SharedExpert, Gate  # noqa: E402
from dsv4mini.numerics import Numerics  # noqa: E402
from dsv4mini.rope import RopeTable, apply_rope, rope_frequencies  # noqa: E402

REF = Numerics("ref")
YARN = {"beta_fast": 32, "beta_slow": 1, "factor": 16, "original_max_position_embeddings": 65536}


def ulp_diff_fraction(a, b, ulps=1):
    """Fraction of elements differing by more than `ulps` BF16 ulps of the golden value."""
    ulp = torch.ldexp(torch.ones_like(b), torch.frexp(b)[1] - 8).clamp(min=2.0 ** -133)
    return ((a - b).abs() > ulps * ulp).float().mean().item()


def cfg(**kw):
    base = dict(hidden_size=256, qk_rope_head_dim=64, rms_norm_eps=1e-6, swiglu_limit=10.0,
                moe_intermediate_size=128, n_shared_experts=1, n_routed_experts=8,
                num_experts_per_tok=2, routed_scaling_factor=1.5, vocab_size=64,
                num_hash_layers=1)
    base.update(kw)
    return types.SimpleNamespace(**base)


class OpsGoldenTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.g = util.ops_golden()

    def test_q_rms(self):
        for d in ("d512", "d128"):
            y = REF.head_rms(self.g[f"q_rms.{d}.q"], 1e-6)
            self.assertTrue(torch.equal(y, self.g[f"q_rms.{d}.y"]), d)

    def test_rope_table_and_rotation(self):
        g = self.g
        pos = g["rope.common.positions"]
        x = g["rope.common.x"]
        for prof, base, yarn in (("base10000", 10000.0, None), ("yarn160000", 160000.0, YARN)):
            self.assertTrue(torch.equal(rope_frequencies(64, base, yarn), g[f"rope.{prof}.freqs"]))
            cos, sin = RopeTable(64, base, yarn).tables_at(pos, 128)
            fwd = apply_rope(x, cos.unsqueeze(1), sin.unsqueeze(1), REF)
            inv = apply_rope(x, cos.unsqueeze(1), sin.unsqueeze(1), REF, inverse=True)
            self.assertLessEqual(ulp_diff_fraction(fwd, g[f"rope.{prof}.fwd"]), 0.01, prof)
            self.assertLessEqual(ulp_diff_fraction(inv, g[f"rope.{prof}.inv"]), 0.01, prof)

    def test_mhc(self):
        g = self.g
        x = g["hc_pre.s6.x"]
        mixes = hc_mixes(x, g["hc_pre.s6.fn"], 1e-6)
        self.assertLessEqual((mixes - g["hc_pre.s6.mixes"]).abs().max().item(), 1e-5)
        a, post, comb = hc_pre(x, g["hc_pre.s6.fn"], g["hc_pre.s6.scale"], g["hc_pre.s6.base"],
                               4, 20, 1e-6, 1e-6, REF)
        self.assertLessEqual((comb - g["hc_pre.s6.comb"]).abs().max().item(), 1e-6)
        self.assertLessEqual(((post - g["hc_pre.s6.post"]) / g["hc_pre.s6.post"]).abs().max()
                             .item(), 1e-6)
        self.assertLessEqual(ulp_diff_fraction(a, g["hc_pre.s6.y"]), 0.005)
        y = hc_post(g["hc_post.s6.f"], g["hc_post.s6.residual"], g["hc_post.s6.post"],
                    g["hc_post.s6.comb"], REF)
        self.assertLessEqual(ulp_diff_fraction(y, g["hc_post.s6.y"]), 0.005)
        y = hc_head(g["hc_head.s6.x"], g["hc_head.s6.fn"], g["hc_head.s6.scale"],
                    g["hc_head.s6.base"], 1e-6, 1e-6, REF)
        self.assertLessEqual(ulp_diff_fraction(y, g["hc_head.s6.y"]), 0.005)

    def test_sparse_attention_kernel(self):
        g = self.g
        for d in ("d128", "d512"):
            q, kv = g[f"sparse_attn.{d}.q"], g[f"sparse_attn.{d}.kv"]
            idx = g[f"sparse_attn.{d}.idx"].long()
            o = sparse_attn_ref(q[None], kv[None], idx[None], g[f"sparse_attn.{d}.sink"],
                                fp32_const(q.shape[-1] ** -0.5))[0]
            self.assertLessEqual(ulp_diff_fraction(o, g[f"sparse_attn.{d}.o"], 2), 0.01, d)

    def test_compressors(self):
        g = self.g
        for v, ratio, dim, idx in (("r4_attn", 4, 512, False), ("r4_index", 4, 128, True),
                                   ("r128_attn", 128, 512, False)):
            c = Compressor(REF, cfg(hidden_size=128), dim, ratio, for_indexer=idx)
            with torch.no_grad():
                c.wkv.weight.copy_(g[f"compressor.{v}.wkv"])
                c.wgate.weight.copy_(g[f"compressor.{v}.wgate"])
                c.ape.copy_(g[f"compressor.{v}.ape"])
                c.norm.weight.copy_(g[f"compressor.{v}.norm"])
                entries = c(g[f"compressor.{v}.x"][None], RopeTable(64, 160000.0, YARN))[0]
            want = g[[k for k in g if k.startswith(f"compressor.{v}.s") and
                      k.endswith(".entries")][0]]
            self.assertEqual(entries.shape, want.shape)
            self.assertTrue(torch.equal(entries, want), v)

    def test_indexer_scores_and_topk(self):
        g = self.g
        q, keys = g["indexer_topk.prefill.q"], g["indexer_topk.prefill.keys"]
        t, n = q.shape[0], q.shape[0] // 4
        w = Q.bf16_round(g["indexer_topk.prefill.w_raw"] * fp32_const(128 ** -0.5 * 4 ** -0.5))
        score = indexer_scores(q[None], keys[:n][None], w[None], REF)[0]
        vis = visible_mask(t, n, 4)
        want = g["indexer_topk.prefill.score"]
        self.assertTrue(torch.equal(score.masked_fill(~vis, float("-inf")), want))
        top = select_topk(score[None], vis, 8)[0]
        top = torch.where(top >= 0, top + t, top)
        self.assertTrue(torch.equal(top, g["indexer_topk.prefill.topk"]))

    def load_gate(self, case, hashed):
        g = self.g
        n_exp, k = g[f"gate.{case}.w"].shape[0], g[f"gate.{case}.indices"].shape[1]
        gate = Gate(REF, cfg(n_routed_experts=n_exp, num_experts_per_tok=k), hashed)
        with torch.no_grad():
            gate.weight.copy_(g[f"gate.{case}.w"])
            if hashed:
                gate.tid2eid.copy_(g[f"gate.{case}.tid2eid"].long())
            else:
                gate.bias.copy_(g[f"gate.{case}.bias"])
        return gate

    def test_gate(self):
        g = self.g
        for case, hashed in (("e256k6", False), ("e8k2", False), ("hash_e256k6", True)):
            gate = self.load_gate(case, hashed)
            ids = g.get(f"gate.{case}.ids", torch.zeros(g[f"gate.{case}.x"].shape[0]).long())
            idx, w = gate(g[f"gate.{case}.x"], ids)
            order = idx.sort(-1)
            want = g[f"gate.{case}.indices"].sort(-1)
            self.assertTrue(torch.equal(order.values, want.values), case)
            got_w = w.gather(1, order.indices)
            want_w = g[f"gate.{case}.route_weights"].gather(1, want.indices)
            self.assertLessEqual(((got_w - want_w) / want_w).abs().max().item(), 1e-6, case)

    def test_experts(self):
        g = self.g
        x = g["expert.routed_fp4.x"]
        routed = RoutedExperts(REF, cfg(n_routed_experts=1))
        with torch.no_grad():
            for w in ("w1", "w2", "w3"):
                getattr(routed, w).copy_(Q.fp4_weight_dequantize(
                    g[f"expert.routed_fp4.{w}_packed"].numpy(),
                    g[f"expert.routed_fp4.{w}_scale_e8m0"].numpy())[None])
        y = routed(REF.act(x), torch.zeros(5, 1, dtype=torch.long), g["expert.routed_fp4.route_weight"])
        self.assertLessEqual(ulp_diff_fraction(y, g["expert.routed_fp4.y"]), 0.01)
        shared = SharedExpert(REF, cfg())
        with torch.no_grad():
            for w in ("w1", "w2", "w3"):
                getattr(shared, w).weight.copy_(Q.fp8_weight_dequantize(
                    g[f"expert.shared_fp8.{w}_codes"].numpy(),
                    g[f"expert.shared_fp8.{w}_scale_e8m0"].numpy()))
        y = shared(g["expert.shared_fp8.x"])
        self.assertLessEqual(ulp_diff_fraction(y, g["expert.shared_fp8.y"]), 0.01)

    def test_moe(self):
        g = self.g
        for case, layer in (("score", 1), ("hash", 0)):
            moe = MoE(REF, cfg(), layer)
            with torch.no_grad():
                moe.gate.weight.copy_(g["moe.common.gate_weight"])
                if moe.hashed:
                    moe.gate.tid2eid.copy_(g["moe.common.tid2eid"].long())
                else:
                    moe.gate.bias.copy_(g["moe.common.gate_bias"])
                for w in ("w1", "w2", "w3"):
                    getattr(moe.experts, w).copy_(torch.stack([Q.fp4_weight_dequantize(
                        g[f"moe.common.experts_{w}_packed"][e].numpy(),
                        g[f"moe.common.experts_{w}_scale_e8m0"][e].numpy()) for e in range(8)]))
                    getattr(moe.shared_experts, w).weight.copy_(Q.fp8_weight_dequantize(
                        g[f"moe.common.shared_{w}_codes"].numpy(),
                        g[f"moe.common.shared_{w}_scale_e8m0"].numpy()))
                trace = {}
                y, _ = moe(g["moe.common.x"][None], g["moe.common.ids"][None], trace)
            want_idx = g[f"moe.{case}.indices"].sort(-1).values
            self.assertTrue(torch.equal(trace["expert_ids"][layer][0], want_idx), case)
            want = g[f"moe.{case}.y"]
            self.assertLessEqual(ulp_diff_fraction(y[0], want), 0.01, case)
            rms = ((y[0] - want).pow(2).mean() / want.pow(2).mean()).sqrt().item()
            self.assertLessEqual(rms, 1e-3, case)


if __name__ == "__main__":
    unittest.main()
