"""Number formats against the reference's op-level golden vectors (bit-exact), and the
checkpoint weight formats (round trips)."""

import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dsv4mini import quant as Q  # noqa: E402


class GoldenFormatsTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.g = util.ops_golden()

    def test_fp8_cast(self):
        g = self.g
        v = Q.e4m3_round(g["fp8_cast.all.x"])
        self.assertTrue(torch.equal(v, g["fp8_cast.all.value"]))
        self.assertTrue(np.array_equal(Q.e4m3_encode(v), g["fp8_cast.all.code"].numpy()))
        self.assertTrue(torch.equal(Q.e4m3_decode(g["fp8_cast.all.code"].numpy()), v))

    def test_fp4_cast(self):
        g = self.g
        v = Q.e2m1_round(g["fp4_cast.all.x"])
        self.assertTrue(torch.equal(v, g["fp4_cast.all.value"]))
        self.assertTrue(np.array_equal(Q.e2m1_encode(v), g["fp4_cast.all.code"].numpy()))

    def test_fp8_activation_quant(self):
        for case in ("rand", "edge"):
            x = self.g[f"act_quant.{case}.x"]
            q, s = Q.fp8_act_quant(x)
            self.assertTrue(np.array_equal(Q.e4m3_encode(q), self.g[f"act_quant.{case}.codes"]))
            self.assertTrue(torch.equal(s, self.g[f"act_quant.{case}.scale"]), case)
            self.assertTrue(torch.equal(Q.fp8_act_qdq(x), self.g[f"act_quant.{case}.deq"]), case)

    def test_kv_qat(self):
        for d in ("d512", "d128"):
            x = self.g[f"act_quant_kv.{d}.x"]
            y = torch.cat((Q.bf16_round(Q.fp8_act_qdq(x[:, :-64], Q.KV_BLOCK)), x[:, -64:]), 1)
            self.assertTrue(torch.equal(y, self.g[f"act_quant_kv.{d}.y"]), d)

    def test_fp4_activation_quant(self):
        for case in ("rand", "edge"):
            x = self.g[f"fp4_quant.{case}.x"]
            q, s = Q.fp4_act_quant(x)
            self.assertTrue(np.array_equal(Q.e2m1_encode(q), self.g[f"fp4_quant.{case}.codes"]))
            self.assertTrue(torch.equal(s, self.g[f"fp4_quant.{case}.scale"]), case)
            y = Q.bf16_round(Q.fp4_act_qdq(x))
            self.assertTrue(torch.equal(y, self.g[f"fp4_quant.{case}.y"]), case)

    def test_hadamard(self):
        y = Q.bf16_round(Q.hadamard(self.g["hadamard.rows.x"]))
        self.assertTrue(torch.equal(y, self.g["hadamard.rows.y"]))

    def test_fp8_and_fp4_gemm(self):
        """Dequantized activation x dequantized weight in FP32, one BF16 rounding: the
        reference's block-scaled GEMMs (exact products, power-of-two scales)."""
        g = self.g
        for key in sorted(k for k in g if k.endswith(".y") and k.startswith(("fp8_gemm",
                                                                            "fp4_gemm"))):
            case = key[:-2]
            x = g[case + ".x"]
            if case.startswith("fp8"):
                w = Q.fp8_weight_dequantize(g[case + ".w_codes"].numpy(),
                                            g[case + ".w_scale_e8m0"].numpy())
            else:
                w = Q.fp4_weight_dequantize(g[case + ".w_packed"].numpy(),
                                            g[case + ".w_scale_e8m0"].numpy())
            y = Q.bf16_round(Q.fp8_act_qdq(x) @ w.t())
            diff = (y != g[key]).float().mean().item()
            self.assertLessEqual(diff, 0.005, case)


class WeightFormatTest(unittest.TestCase):
    def test_fp8_weight_round_trip(self):
        gen = torch.Generator().manual_seed(0)
        w = torch.randn(200, 300, generator=gen) * 0.05
        w[:128, :128] = 0                      # an all-zero block
        codes, scales = Q.fp8_weight_quantize(w)
        self.assertEqual(codes.shape, (200, 300))
        self.assertEqual(scales.shape, (2, 3))
        deq = Q.fp8_weight_dequantize(codes, scales)
        self.assertTrue(torch.equal(deq, Q.fp8_weight_qdq(w)))
        self.assertLess(((deq - w).norm() / w.norm()).item(), 0.05)
        # Quantizing quantized values reproduces them exactly (even with other scales).
        self.assertTrue(torch.equal(Q.fp8_weight_qdq(deq), deq))
        self.assertTrue(torch.equal(Q.fp8_weight_qdq(deq * 0.75), Q.fp8_weight_qdq(deq * 0.75)))
        # Every block uses its range: the largest |code| of a non-zero block is > 224.
        mags = Q.e4m3_decode(codes).abs()
        self.assertGreater(mags[128:, :128].max().item(), 224)

    def test_fp4_weight_round_trip(self):
        gen = torch.Generator().manual_seed(1)
        w = torch.randn(64, 256, generator=gen) * 0.02
        packed, scales = Q.fp4_weight_quantize(w)
        self.assertEqual(packed.dtype, np.int8)
        self.assertEqual(packed.shape, (64, 128))
        self.assertEqual(scales.shape, (64, 8))
        deq = Q.fp4_weight_dequantize(packed, scales)
        self.assertTrue(torch.equal(deq, Q.fp4_weight_qdq(w)))
        self.assertTrue(torch.equal(Q.fp4_weight_qdq(deq), deq))
        # Low nibble = element 2j.
        codes = Q.e2m1_encode(Q.e2m1_round(torch.tensor([[1.0, -6.0] + [0.0] * 30])))
        p, _ = Q.fp4_weight_quantize(torch.tensor([[1.0, -6.0] + [0.0] * 30]))
        self.assertEqual(int(p.view(np.uint8)[0, 0]), int(codes[0, 0] | (codes[0, 1] << 4)))

    def test_negative_zero_decodes_to_zero(self):
        self.assertEqual(Q.e4m3_decode(np.array([0x80], np.uint8)).item(), 0.0)
        self.assertEqual(Q.e2m1_decode(np.array([0x8], np.uint8)).item(), 0.0)
        self.assertTrue(np.isnan(Q.e4m3_decode(np.array([0x7F], np.uint8)).item()))

    def test_e8m0_and_bf16_bits(self):
        b = np.array([0, 1, 120, 127, 133, 254], np.uint8)
        s = Q.e8m0_decode(b)
        self.assertEqual(s[3].item(), 1.0)
        self.assertEqual(s[0].item(), 2.0 ** -127)
        self.assertTrue(np.array_equal(Q.e8m0_encode(s), b))
        with self.assertRaises(ValueError):
            Q.e8m0_encode(torch.tensor([3.0]))
        x = np.array([1.0, -2.5, 1.00390625, 1.01171875, 3.4e38, np.inf], np.float32)
        bits = Q.f32_to_bf16_bits(x)
        back = Q.bf16_bits_to_f32(bits)
        self.assertTrue(np.array_equal(back, Q.bf16_round(torch.from_numpy(x)).numpy()))
        self.assertEqual(back[2], 1.0)         # tie to even
        self.assertEqual(back[3], 1.015625)    # tie to even (upwards)

    def test_off_grid_values_are_refused(self):
        with self.assertRaisesRegex(ValueError, "not on the grid"):
            Q.e4m3_encode(np.array([1.01], np.float32))
        with self.assertRaisesRegex(ValueError, "not on the grid"):
            Q.e2m1_encode(np.array([2.5], np.float32))

    def test_straight_through_estimator(self):
        w = torch.randn(128, 128, requires_grad=True)
        y = Q.fake_quant_fp8_weight(w)
        self.assertTrue(torch.equal(y.detach(), Q.fp8_weight_qdq(w)))
        y.sum().backward()
        self.assertTrue(torch.equal(w.grad, torch.ones_like(w)))


if __name__ == "__main__":
    unittest.main()
