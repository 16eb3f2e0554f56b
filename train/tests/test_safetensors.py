import json
import os
import struct
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402,F401

import numpy as np  # noqa: E402

from dsv4mini.safetensors_io import (INDEX_FILE, STORAGE, SafetensorsError, StTensor,  # noqa: E402
                                     read_safetensors, read_sharded, write_safetensors)


def sample_tensors():
    rng = np.random.default_rng(0)
    return {
        "f32": StTensor("F32", rng.standard_normal((3, 5)).astype("<f4")),
        "bf16": StTensor("BF16", rng.integers(0, 1 << 16, (4, 2)).astype("<u2")),
        "fp8": StTensor("F8_E4M3", rng.integers(0, 256, (7,)).astype("u1")),
        "e8m0": StTensor("F8_E8M0", rng.integers(0, 256, (2, 3)).astype("u1")),
        "i8": StTensor("I8", rng.integers(-128, 128, (5, 3)).astype("i1")),
        "i64": StTensor("I64", rng.integers(-2**62, 2**62, (2, 2)).astype("<i8")),
        "i32": StTensor("I32", rng.integers(-2**31, 2**31, (9,)).astype("<i4")),
        "empty": StTensor("F32", np.zeros((0, 4), dtype="<f4")),
    }


class SafetensorsTest(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.TemporaryDirectory()
        self.addCleanup(self.dir.cleanup)

    def path(self, name):
        return os.path.join(self.dir.name, name)

    def test_round_trip_every_dtype(self):
        t = sample_tensors()
        write_safetensors(self.path("a.safetensors"), t, {"format": "pt"})
        back = read_safetensors(self.path("a.safetensors"))
        self.assertEqual(set(back), set(t))
        for k, v in t.items():
            self.assertEqual(back[k].dtype, v.dtype)
            self.assertEqual(back[k].shape, v.shape)
            self.assertTrue(np.array_equal(back[k].array, v.array), k)

    def test_reads_the_reference_checkpoint(self):
        t = read_sharded(util.TINY_A)
        self.assertEqual(len(t), 585)
        self.assertEqual(t["layers.0.attn.wq_a.weight"].dtype, "F8_E4M3")
        self.assertEqual(t["layers.0.ffn.experts.0.w1.weight"].shape, (128, 128))
        self.assertEqual(t["layers.0.ffn.gate.tid2eid"].dtype, "I64")
        total = sum(v.array.nbytes for v in t.values())
        with open(os.path.join(util.TINY_A, INDEX_FILE)) as f:
            self.assertEqual(total, json.load(f)["metadata"]["total_size"])

    def test_storage_dtype_is_checked(self):
        with self.assertRaises(SafetensorsError):
            StTensor("BF16", np.zeros(3, dtype=np.float32))
        with self.assertRaises(SafetensorsError):
            StTensor("F4", np.zeros(3, dtype=np.uint8))
        self.assertIn("F8_E8M0", STORAGE)

    def corrupt(self, header, data=b""):
        h = json.dumps(header).encode()
        p = self.path("bad.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", len(h)) + h + data)
        return p

    def test_errors_name_file_and_tensor(self):
        p = self.corrupt({"w": {"dtype": "F32", "shape": [2, 2], "data_offsets": [0, 16]}},
                         b"\0" * 8)
        with self.assertRaisesRegex(SafetensorsError, r"bad\.safetensors: tensor w: "):
            read_safetensors(p)
        p = self.corrupt({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 4]}}, b"\0" * 4)
        with self.assertRaisesRegex(SafetensorsError, r"tensor w: 4 bytes for F32 \[2\]"):
            read_safetensors(p)
        p = self.corrupt({"w": {"dtype": "Q7", "shape": [1], "data_offsets": [0, 1]}}, b"\0")
        with self.assertRaisesRegex(SafetensorsError, r"tensor w: unsupported dtype"):
            read_safetensors(p)
        p = self.corrupt({"a": {"dtype": "U8", "shape": [2], "data_offsets": [0, 2]},
                          "b": {"dtype": "U8", "shape": [2], "data_offsets": [1, 3]}}, b"\0" * 3)
        with self.assertRaisesRegex(SafetensorsError, r"overlap"):
            read_safetensors(p)
        p = self.path("short.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", 1000) + b"{}")
        with self.assertRaisesRegex(SafetensorsError, r"short\.safetensors: header length"):
            read_safetensors(p)
        p = self.path("json.safetensors")
        with open(p, "wb") as f:
            f.write(struct.pack("<Q", 3) + b"{x}")
        with self.assertRaisesRegex(SafetensorsError, r"json\.safetensors: header is not valid"):
            read_safetensors(p)

    def test_sharded_index_is_checked(self):
        t = sample_tensors()
        write_safetensors(self.path("s1.safetensors"), {"f32": t["f32"]})
        write_safetensors(self.path("s2.safetensors"), {"i8": t["i8"], "i64": t["i64"]})
        index = {"metadata": {}, "weight_map": {"f32": "s1.safetensors", "i8": "s2.safetensors",
                                                "i64": "s2.safetensors"}}
        with open(self.path(INDEX_FILE), "w") as f:
            json.dump(index, f)
        back = read_sharded(self.dir.name)
        self.assertEqual(sorted(back), ["f32", "i64", "i8"])
        index["weight_map"]["ghost"] = "s1.safetensors"
        with open(self.path(INDEX_FILE), "w") as f:
            json.dump(index, f)
        with self.assertRaisesRegex(SafetensorsError, r"s1\.safetensors: tensor ghost listed"):
            read_sharded(self.dir.name)
        del index["weight_map"]["ghost"], index["weight_map"]["i64"]
        with open(self.path(INDEX_FILE), "w") as f:
            json.dump(index, f)
        with self.assertRaisesRegex(SafetensorsError, r"s2\.safetensors: tensor i64 is not listed"):
            read_sharded(self.dir.name)
        index["weight_map"]["i64"] = "s2.safetensors"
        index["weight_map"]["zz"] = "s3.safetensors"
        with open(self.path(INDEX_FILE), "w") as f:
            json.dump(index, f)
        with self.assertRaisesRegex(SafetensorsError, r"shard s3\.safetensors \(tensor zz\)"):
            read_sharded(self.dir.name)


if __name__ == "__main__":
    unittest.main()
