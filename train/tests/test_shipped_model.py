"""The shipped model (models/dsv4-mini) gives the same predictions in dsv4 as in the trainer.

The trainer's forward in numerics='ref' (every rounding point of DeepSeek's reference) and the
engine (`dsv4 eval`, the C++ forward) score the same token windows; their mean negative
log-likelihoods (main head and MTP head) and top-1 accuracies must agree.  Tolerance: mean NLL
within 0.02 nats (0.4 % of the ~5 nat level) -- the two implementations differ only by
accumulation order inside FP32 sums, which moves individual FP8 roundings, and over a few
hundred tokens that averages to well under 0.01 (see docs/training.md for the measured gap).

Needs DSV4_BIN (the dsv4 binary; CTest sets it); skipped without it.
"""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import util  # noqa: E402  (import paths, one torch thread)
import torch  # noqa: E402

from dsv4mini.checkpoint import load_checkpoint  # noqa: E402

MODEL = os.environ.get("DSV4_TEST_MODEL") or os.path.join(util.REPO, "models", "dsv4-mini")
CONTEXT = 96
# Our own text, not from the training data: prose, then a chat turn in the V4 format.
TEXT = (
    "The river ran low that summer, and the old mill stood silent for the first time in "
    "forty years. Children walked across stones that had always been under water, and "
    "their parents argued about whether the rain would ever come back. In the evenings "
    "the miller counted the sacks of grain that were left and wrote the numbers in a "
    "small book.\n\n"
    "To install a package, run the command with the name of the package as its argument. "
    "The program reads its configuration from a file in your home directory; if the file "
    "does not exist, default values are used.\n"
    "<｜begin▁of▁sentence｜><｜User｜>What is 12 plus 30?<｜Assistant｜><think>12 + 30 = 42."
    "</think>12 + 30 = 42.<｜end▁of▁sentence｜>"
)


def dsv4_bin():
    return os.environ.get("DSV4_BIN", "")


@unittest.skipUnless(dsv4_bin(), "DSV4_BIN is not set (CTest sets it to the dsv4 binary)")
class ShippedModelMatchesEngine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory()
        text_path = os.path.join(cls.tmp.name, "text.txt")
        with open(text_path, "w", encoding="utf-8") as f:
            f.write(TEXT)
        out = subprocess.run([dsv4_bin(), "eval", "--model", MODEL, "--text", text_path,
                              "--context", str(CONTEXT), "--threads", "1", "--json"],
                             check=True, capture_output=True, text=True)
        cls.engine = json.loads(out.stdout)
        # The same ids the engine scored: tokenize as a text line (BOS text EOS) and strip.
        jl = os.path.join(cls.tmp.name, "text.jsonl")
        with open(jl, "w", encoding="utf-8") as f:
            f.write(json.dumps({"text": TEXT}) + "\n")
        ids_path = os.path.join(cls.tmp.name, "ids.bin")
        subprocess.run([dsv4_bin(), "tokenize", "--tokenizer", MODEL, "--input", jl,
                        "--output", ids_path], check=True, capture_output=True)
        with open(ids_path + ".json", encoding="utf-8") as f:
            dtype = {"uint16": torch.int16, "uint32": torch.int32}[json.load(f)["dtype"]]
        with open(ids_path, "rb") as f:
            raw = bytearray(f.read())
        ids = torch.frombuffer(raw, dtype=dtype).to(torch.int64) & (
            0xFFFF if dtype == torch.int16 else 0xFFFFFFFF)
        cls.ids = ids[1:-1]  # drop BOS and EOS
        _, cls.model = load_checkpoint(MODEL, numerics="ref")
        cls.model.eval()

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def trainer_scores(self):
        """Chunked windows as `dsv4 eval` cuts them: window k = ids[k*C:(k+1)*C] from position
        0; every target but the window's first token is scored."""
        main = {"nll": 0.0, "n": 0, "top1": 0}
        mtp = {"nll": 0.0, "n": 0}
        with torch.no_grad():
            for s in range(0, len(self.ids), CONTEXT):
                w = self.ids[s:s + CONTEXT].unsqueeze(0)
                if w.shape[1] < 2:
                    continue
                out = self.model(w)
                logp = torch.log_softmax(out["logits"][0, :-1].double(), -1)
                tgt = w[0, 1:]
                main["nll"] -= logp.gather(1, tgt.unsqueeze(1)).sum().item()
                main["n"] += len(tgt)
                main["top1"] += int((logp.argmax(-1) == tgt).sum())
                if "mtp_logits" in out and w.shape[1] > 2:
                    lp2 = torch.log_softmax(out["mtp_logits"][0, :-1].double(), -1)
                    t2 = w[0, 2:]
                    mtp["nll"] -= lp2.gather(1, t2.unsqueeze(1)).sum().item()
                    mtp["n"] += len(t2)
        return main, mtp

    def test_token_count_matches(self):
        self.assertEqual(self.engine["tokens"], len(self.ids))

    def test_main_and_mtp_nll_match(self):
        main, mtp = self.trainer_scores()
        eng = self.engine["main"]
        self.assertEqual(eng["scored"], main["n"])
        py_nll = main["nll"] / main["n"]
        print(f"\nmain NLL: trainer {py_nll:.5f} dsv4 {eng['mean_nll']:.5f}; top-1 "
              f"{main['top1']} vs {round(eng['top1_accuracy'] * eng['scored'])} of {main['n']}")
        self.assertLess(abs(py_nll - eng["mean_nll"]), 0.02)
        self.assertLessEqual(abs(main["top1"] - eng["top1_accuracy"] * eng["scored"]),
                             max(2, 0.02 * main["n"]))
        # A trained model, not noise: far below the uniform bound ln(V).
        self.assertLess(py_nll, 0.8 * math.log(self.model.cfg.vocab_size))
        if "mtp" in self.engine and self.engine["mtp"].get("scored"):
            em = self.engine["mtp"]
            py_mtp = mtp["nll"] / mtp["n"]
            print(f"MTP NLL: trainer {py_mtp:.5f} dsv4 {em['mean_nll']:.5f}")
            self.assertEqual(em["scored"], mtp["n"])
            self.assertLess(abs(py_mtp - em["mean_nll"]), 0.02)


if __name__ == "__main__":
    unittest.main()
