#!/usr/bin/env python3
"""Prints documents of a token file as text, to check what the model is trained on.

    /usr/bin/python3 train/data/show.py train/data/out/val_chat.bin --first 3
    /usr/bin/python3 train/data/show.py train/data/out/train.bin --index 17 --index 18

Decodes with the tokenizer.json next to the data (DIR/tokenizer/) like the engine's ByteLevel
decoder: a token whose characters are all in the byte alphabet becomes those bytes, any other
token (BOS, <｜User｜>, </think>, ...) its own text.  Documents are split at BOS.
"""
import argparse
import json
import os
import sys

import numpy as np


def byte_alphabet():
    """The GPT-2 byte <-> printable character map used by byte-level BPE."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + \
        list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(bs, cs)}


class Decoder:
    def __init__(self, tokenizer_json):
        with open(tokenizer_json, encoding="utf-8") as f:
            tok = json.load(f)
        inv = byte_alphabet()
        self.pieces = {}
        for s, i in tok["model"]["vocab"].items():
            if all(c in inv for c in s):
                self.pieces[i] = bytes(inv[c] for c in s)
            else:
                self.pieces[i] = s.encode()
        for a in tok.get("added_tokens", []):
            self.pieces[a["id"]] = a["content"].encode()

    def decode(self, ids):
        return b"".join(self.pieces.get(int(i), b"") for i in ids).decode("utf-8", "replace")


def load(path):
    with open(path + ".json") as f:
        side = json.load(f)
    return np.fromfile(path, dtype=np.dtype(side["dtype"]).newbyteorder("<"))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bin")
    p.add_argument("--tokenizer", default="", help="tokenizer.json (default: next to the data)")
    p.add_argument("--first", type=int, default=0)
    p.add_argument("--index", type=int, action="append", default=[])
    args = p.parse_args(argv)
    tok = args.tokenizer or os.path.join(os.path.dirname(os.path.abspath(args.bin)), "tokenizer",
                                         "tokenizer.json")
    dec = Decoder(tok)
    ids = load(args.bin)
    starts = list(np.flatnonzero(ids == 0)) + [len(ids)]
    wanted = args.index + list(range(args.first))
    for k in wanted:
        if k + 1 >= len(starts):
            print(f"no document {k}", file=sys.stderr)
            return 1
        doc = ids[starts[k]:starts[k + 1]]
        print(f"=== document {k}: {len(doc)} tokens ===")
        print(dec.decode(doc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
