#!/usr/bin/env python3
"""Perplexity of a text file in the trainer's numerics, cut exactly as `dsv4 eval` cuts it.

    /usr/bin/python3 train/eval_perplexity.py --dsv4 build/release/apps/dsv4/dsv4 \
        --model models/dsv4-mini --ckpt train/runs/mini-seed1/ckpt.pt \
        --text val60k.txt --context 512

Prints one JSON object: for each numerics the mean NLL (nats per token) and perplexity of the
main head, and of the MTP head (token q+2).  Numerics:
  fp32  the run's checkpoint (FP32 master weights), numerics='train'      (needs --ckpt)
  qat   the same weights with the emulated FP8/FP4 quantisation (QAT fake-quant) (--ckpt)
  ref   the exported model in the reference's arithmetic, numerics='ref' (--model)
The text is tokenized by `dsv4 tokenize` with the model's tokenizer (the ids `dsv4 eval`
scores); windows are ids[k*C:(k+1)*C] and every token but a window's first is scored, as in
`dsv4 eval --context C` (docs/eval.md).
"""
import argparse
import json
import math
import os
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from dsv4mini import runtime  # noqa: E402

runtime.set_env_before_torch()

import torch  # noqa: E402

from dsv4mini.checkpoint import load_checkpoint  # noqa: E402
from dsv4mini.model import Transformer  # noqa: E402


def tokenize(dsv4, model_dir, text_path):
    """The ids `dsv4 eval` scores: the text as one line (BOS text EOS), BOS and EOS dropped."""
    with open(text_path, encoding="utf-8") as f:
        text = f.read()
    with tempfile.TemporaryDirectory() as tmp:
        jl = os.path.join(tmp, "text.jsonl")
        with open(jl, "w", encoding="utf-8") as f:
            f.write(json.dumps({"text": text}) + "\n")
        ids_path = os.path.join(tmp, "ids.bin")
        subprocess.run([dsv4, "tokenize", "--tokenizer", model_dir, "--input", jl,
                        "--output", ids_path], check=True, capture_output=True)
        with open(ids_path + ".json", encoding="utf-8") as f:
            dtype = {"uint16": torch.int16, "uint32": torch.int32}[json.load(f)["dtype"]]
        with open(ids_path, "rb") as f:
            raw = bytearray(f.read())
    ids = torch.frombuffer(raw, dtype=dtype).to(torch.int64)
    ids &= 0xFFFF if dtype == torch.int16 else 0xFFFFFFFF
    return ids[1:-1]


@torch.no_grad()
def score(model, ids, context):
    main_nll, main_n, mtp_nll, mtp_n = 0.0, 0, 0.0, 0
    for s in range(0, len(ids), context):
        w = ids[s:s + context].unsqueeze(0)
        if w.shape[1] < 2:
            continue
        out = model(w)
        logp = torch.log_softmax(out["logits"][0, :-1].double(), -1)
        main_nll -= logp.gather(1, w[0, 1:].unsqueeze(1)).sum().item()
        main_n += w.shape[1] - 1
        if out.get("mtp_logits") is not None and w.shape[1] > 2:
            lp2 = torch.log_softmax(out["mtp_logits"][0, :-1].double(), -1)
            mtp_nll -= lp2.gather(1, w[0, 2:].unsqueeze(1)).sum().item()
            mtp_n += w.shape[1] - 2
    row = {"scored": main_n, "mean_nll": main_nll / main_n,
           "perplexity": math.exp(main_nll / main_n)}
    if mtp_n:
        row["mtp_mean_nll"] = mtp_nll / mtp_n
        row["mtp_perplexity"] = math.exp(mtp_nll / mtp_n)
    return row


def main(argv):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--dsv4", required=True, help="the dsv4 binary (tokenizes the text)")
    p.add_argument("--model", required=True, help="exported model directory (tokenizer, ref)")
    p.add_argument("--ckpt", default="", help="the run's ckpt.pt (fp32 and qat rows)")
    p.add_argument("--text", required=True)
    p.add_argument("--context", type=int, default=512)
    p.add_argument("--threads", type=int, default=os.cpu_count() or 1)
    args = p.parse_args(argv)
    runtime.configure_cpu_training(args.threads)
    ids = tokenize(args.dsv4, args.model, args.text)
    result = {"tokens": len(ids), "context": args.context}
    cfg, ref = load_checkpoint(args.model, numerics="ref")
    ref.eval()
    if args.ckpt:
        state = torch.load(args.ckpt)
        model = Transformer(cfg, numerics="train", seed=None)
        model.load_state_dict(state["model"])
        model.eval()
        result["fp32"] = score(model, ids, args.context)
        model.set_qat(True)
        result["qat"] = score(model, ids, args.context)
    result["ref"] = score(ref, ids, args.context)
    print(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
