import copy
import json
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

from dsv4mini.config import ConfigError, ModelConfig  # noqa: E402


def tiny_a() -> dict:
    with open(os.path.join(util.TINY_A, "config.json")) as f:
        return json.load(f)


class ConfigTest(unittest.TestCase):
    def test_tiny_a_round_trip(self):
        d = tiny_a()
        cfg = ModelConfig.from_dict(d).validate()
        self.assertEqual(cfg.to_dict(), d)
        self.assertEqual(cfg.hc_mix, 24)
        self.assertEqual(cfg.compress_ratio(3), 128)

    def test_training_config_is_valid(self):
        path = os.path.join(util.TRAIN, "configs", "dsv4-mini.json")
        if not os.path.exists(path):
            self.skipTest("no train/configs/dsv4-mini.json")
        ModelConfig.from_json_file(path).validate()

    def refuse(self, field_re, **changes):
        d = tiny_a()
        for k, v in changes.items():
            if "." in k:
                a, b = k.split(".")
                d[a] = copy.deepcopy(d[a])
                d[a][b] = v
            else:
                d[k] = v
        with self.assertRaises(ConfigError) as cm:
            ModelConfig.from_dict(d).validate()
        msg = str(cm.exception)
        self.assertNotIn("\n", msg)
        self.assertRegex(msg, field_re)
        return msg

    def test_refusals(self):
        self.refuse(r"'compress_ratios\[2\]' = 8: must be 0 .*4 .*128",
                    compress_ratios=[0, 0, 8, 128, 4, 128, 0])
        self.refuse(r"'compress_ratios\[6\]' = 4: must be 0: the MTP layer",
                    compress_ratios=[0, 0, 4, 128, 4, 128, 4])
        self.refuse(r"'compress_ratios'.*7 entries", compress_ratios=[0, 0, 4, 128, 4, 128])
        self.refuse(r"'hc_mult' = 0: must be an integer \[1, 16\]", hc_mult=0)
        self.refuse(r"'hc_sinkhorn_iters' = 0", hc_sinkhorn_iters=0)
        self.refuse(r"'hc_sinkhorn_iters' = 1000", hc_sinkhorn_iters=1000)
        self.refuse(r"'hidden_size' = 200: must be a multiple of 128", hidden_size=200)
        self.refuse(r"'moe_intermediate_size' = 100", moe_intermediate_size=100)
        self.refuse(r"'q_lora_rank' = 96", q_lora_rank=96)
        self.refuse(r"'o_lora_rank' = 32: o_groups \* o_lora_rank", o_lora_rank=32)
        self.refuse(r"'index_topk' = 0", index_topk=0)
        self.refuse(r"'head_dim' = 64: must exceed qk_rope_head_dim", head_dim=64)
        self.refuse(r"'head_dim' = 160: head_dim - qk_rope_head_dim must be a multiple of 64",
                    head_dim=160)
        self.refuse(r"'num_attention_heads' = 3: must be divisible by o_groups",
                    num_attention_heads=3)
        self.refuse(r"'num_experts_per_tok' = 9: must be an integer \[1, 8\]",
                    num_experts_per_tok=9)
        self.refuse(r"'num_hash_layers' = 7", num_hash_layers=7)
        self.refuse(r"'index_head_dim' = 96: must be a power of two", index_head_dim=96)
        self.refuse(r"'qk_rope_head_dim' = 63", qk_rope_head_dim=63, head_dim=127)
        self.refuse(r"'num_key_value_heads' = 2", num_key_value_heads=2)
        self.refuse(r"'scoring_func' = 'softmax'", scoring_func="softmax")
        self.refuse(r"'expert_dtype' = 'fp8'", expert_dtype="fp8")
        self.refuse(r"'tie_word_embeddings' = True", tie_word_embeddings=True)
        self.refuse(r"'rope_scaling.type' = 'linear'", **{"rope_scaling.type": "linear"})
        self.refuse(r"'rope_scaling.factor' = 0", **{"rope_scaling.factor": 0})
        self.refuse(r"'quantization_config.weight_block_size'",
                    **{"quantization_config.weight_block_size": [64, 64]})
        self.refuse(r"'eos_token_id' = 1024", eos_token_id=1024)
        self.refuse(r"'rms_norm_eps' = -1", rms_norm_eps=-1)
        self.refuse(r"'vocab_size' = 0", vocab_size=0)
        self.refuse(r"'sliding_window' = 'x'", sliding_window="x")

    def test_missing_field(self):
        d = tiny_a()
        del d["hidden_size"]
        with self.assertRaisesRegex(ConfigError, "'hidden_size' is missing"):
            ModelConfig.from_dict(d)


if __name__ == "__main__":
    unittest.main()
