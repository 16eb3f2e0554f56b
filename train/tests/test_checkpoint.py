"""Export to / load from the DeepSeek-V4-Flash checkpoint format."""

import json
import os
import sys
import tempfile
import unittest
from unittest import mock

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from dsv4mini import checkpoint as C  # noqa: E402
from dsv4mini import quant as Q  # noqa: E402
from dsv4mini import Transformer  # noqa: E402
from dsv4mini.safetensors_io import (INDEX_FILE, StTensor, read_header, read_safetensors,  # noqa: E402
                                     read_sharded, write_safetensors)
from test_train_mode import tiny_config  # noqa: E402


def state(model):
    return {k: v.detach().clone() for k, v in model.state_dict().items()}


class CheckpointTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.addCleanup(self.tmp.cleanup)

    def out(self, name="model"):
        return os.path.join(self.tmp.name, name)

    def test_tiny_a_load_export_load_is_exact(self):
        cfg, m = C.load_checkpoint(util.TINY_A)
        before = state(m)
        C.export_checkpoint(m, cfg, self.out(), max_shard_bytes=4 << 20)
        orig = read_sharded(util.TINY_A)
        mine = read_sharded(self.out())
        self.assertEqual(sorted(orig), sorted(mine))
        for k in orig:
            self.assertEqual((orig[k].dtype, orig[k].shape), (mine[k].dtype, mine[k].shape), k)
        with open(os.path.join(self.out(), "config.json")) as f, \
                open(os.path.join(util.TINY_A, "config.json")) as g:
            self.assertEqual(json.load(f), json.load(g))
        with open(os.path.join(self.out(), INDEX_FILE)) as f:
            index = json.load(f)
        self.assertEqual(index["metadata"]["total_size"], 9723818)
        shards = sorted(set(index["weight_map"].values()))
        self.assertEqual(shards[0], f"model-00001-of-{len(shards):05d}.safetensors")
        mtp_shards = {v for k, v in index["weight_map"].items() if k.startswith("mtp.")}
        self.assertFalse(mtp_shards & {v for k, v in index["weight_map"].items()
                                       if not k.startswith("mtp.")})
        self.assertEqual(read_header(os.path.join(self.out(), shards[0]))["__metadata__"],
                         {"format": "pt"})
        _, back = C.load_checkpoint(self.out())
        after = state(back)
        for k, v in before.items():
            self.assertTrue(torch.equal(v, after[k]), k)

    def test_export_holds_the_quantized_weights_exactly(self):
        cfg = tiny_config()
        m = Transformer(cfg, numerics="train", seed=11)
        with torch.no_grad():
            m.layers[1].ffn.gate.bias.copy_(torch.tensor([0.25, -0.5, 0.0, 1e-3]))
        C.export_checkpoint(m, cfg, self.out(), extra_files={"tokenizer.json": b"{}"})
        with open(os.path.join(self.out(), "tokenizer.json"), "rb") as f:
            self.assertEqual(f.read(), b"{}")
        _, back = C.load_checkpoint(self.out(), numerics="train")
        loaded = dict(back.named_parameters())
        for name, p, fmt in C.checkpoint_entries(m):
            want = {"fp8": Q.fp8_weight_qdq, "fp4": Q.fp4_weight_qdq, "bf16": Q.bf16_round,
                    "f32": lambda t: t, "i64": lambda t: t}[fmt](p.detach())
            got = loaded[name] if name in loaded else dict(back.named_buffers())[name]
            self.assertTrue(torch.equal(got.detach(), want), name)
        t = read_sharded(self.out())
        self.assertEqual(t["layers.1.attn.wo_a.weight"].dtype, "F8_E4M3")
        self.assertEqual(t["layers.1.ffn.experts.3.w2.weight"].dtype, "I8")
        self.assertEqual(t["layers.1.ffn.experts.3.w2.scale"].shape, (128, 4))
        self.assertEqual(t["layers.0.ffn.gate.tid2eid"].dtype, "I64")
        self.assertNotIn("layers.0.ffn.gate.bias", t)
        self.assertNotIn("layers.1.ffn.gate.tid2eid", t)
        self.assertEqual(t["mtp.0.ffn.gate.bias"].dtype, "F32")
        self.assertNotIn("mtp.0.embed.weight", t)
        # The exported model runs with the reference numerics.
        back.set_numerics("ref")
        with torch.no_grad():
            out = back(torch.arange(20)[None])
        self.assertTrue(torch.isfinite(out["logits"]).all())

    def test_export_is_atomic(self):
        cfg = tiny_config()
        m = Transformer(cfg, numerics="train", seed=12)
        calls = []
        real = C._write_file

        def failing(path, data):
            calls.append(path)
            if len(calls) == 2:
                raise OSError("disk full (simulated)")
            real(path, data)

        with mock.patch.object(C, "_write_file", failing):
            with self.assertRaisesRegex(OSError, "simulated"):
                C.export_checkpoint(m, cfg, self.out(), max_shard_bytes=1 << 20)
        self.assertEqual(os.listdir(self.tmp.name), [])
        C.export_checkpoint(m, cfg, self.out())
        with self.assertRaises(FileExistsError):
            C.export_checkpoint(m, cfg, self.out())
        m2 = Transformer(cfg, numerics="train", seed=13)
        C.export_checkpoint(m2, cfg, self.out(), overwrite=True)
        self.assertEqual(os.listdir(self.tmp.name), ["model"])
        _, back = C.load_checkpoint(self.out(), numerics="train")
        self.assertTrue(torch.equal(back.head.weight, Q.bf16_round(m2.head.weight.detach())))
        with self.assertRaisesRegex(C.CheckpointError, "not allowed"):
            C.export_checkpoint(m, cfg, self.out("x"), extra_files={"../evil": b""})
        with self.assertRaisesRegex(C.CheckpointError, "not allowed"):
            C.export_checkpoint(m, cfg, self.out("x"), extra_files={"config.json": b""})

    def edit_shard(self, fn):
        """Applies fn(dict of tensors) to the shard holding layers.0 and rewrites the index."""
        with open(os.path.join(self.out(), INDEX_FILE)) as f:
            index = json.load(f)
        shard = index["weight_map"]["layers.0.attn.wq_a.weight"]
        path = os.path.join(self.out(), shard)
        t = read_safetensors(path)
        fn(t)
        write_safetensors(path, t)
        index["weight_map"] = {k: v for k, v in index["weight_map"].items() if v != shard}
        index["weight_map"].update({k: shard for k in t})
        with open(os.path.join(self.out(), INDEX_FILE), "w") as f:
            json.dump(index, f)

    def test_load_errors_name_the_tensor(self):
        cfg = tiny_config()
        C.export_checkpoint(Transformer(cfg, numerics="train", seed=14), cfg, self.out())
        self.edit_shard(lambda t: t.pop("layers.0.attn.wq_a.scale"))
        with self.assertRaisesRegex(C.CheckpointError, "tensor layers.0.attn.wq_a.scale is missing"):
            C.load_checkpoint(self.out())
        self.edit_shard(lambda t: t.update({"layers.0.attn.wq_a.scale": StTensor(
            "F32", np.zeros((1, 1), np.float32))}))
        with self.assertRaisesRegex(C.CheckpointError,
                                    r"layers.0.attn.wq_a.scale is F32 \[1, 1\], expected F8_E8M0"):
            C.load_checkpoint(self.out())
        self.edit_shard(lambda t: t.update({
            "layers.0.attn.wq_a.scale": StTensor("F8_E8M0", np.full((1, 1), 120, np.uint8)),
            "layers.0.bogus": StTensor("F32", np.zeros(1, np.float32))}))
        with self.assertRaisesRegex(C.CheckpointError, "unexpected tensor layers.0.bogus"):
            C.load_checkpoint(self.out())

        def repeat_expert(t):
            t.pop("layers.0.bogus")
            tid = t["layers.0.ffn.gate.tid2eid"].array.copy()
            tid[5, 1] = tid[5, 0]
            t["layers.0.ffn.gate.tid2eid"] = StTensor("I64", tid)
        self.edit_shard(repeat_expert)
        with self.assertRaisesRegex(C.CheckpointError, "tid2eid: row 5 repeats an expert id"):
            C.load_checkpoint(self.out())


if __name__ == "__main__":
    unittest.main()
