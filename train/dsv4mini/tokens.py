"""Token files written by `dsv4 tokenize`: little-endian uint16/uint32 ids, described by FILE.json."""
import json

import numpy as np

_DTYPES = {"uint16": "<u2", "uint32": "<u4"}


class TokenFile:
    """A memory-mapped token file whose ids were checked against the vocabulary once."""

    def __init__(self, path, ids):
        self.path = path
        self.ids = ids

    @classmethod
    def open(cls, path, vocab_size):
        meta_path = path + ".json"
        try:
            with open(meta_path, encoding="utf-8") as f:
                meta = json.load(f)
        except (OSError, ValueError) as e:
            raise ValueError(f"{meta_path}: cannot read the token file description ({e})")
        if meta.get("format") != "dsv4-tokens" or meta.get("dtype") not in _DTYPES:
            raise ValueError(f"{meta_path}: not a dsv4-tokens description "
                             f"(format {meta.get('format')!r}, dtype {meta.get('dtype')!r})")
        if meta.get("vocab_size") != vocab_size:
            raise ValueError(f"{path}: tokenized for vocab {meta.get('vocab_size')}, "
                             f"the model has {vocab_size}")
        dtype = np.dtype(_DTYPES[meta["dtype"]])
        try:
            ids = np.memmap(path, dtype=dtype, mode="r")
        except (OSError, ValueError) as e:
            raise ValueError(f"{path}: cannot map ({e})")
        if len(ids) != meta.get("num_tokens"):
            raise ValueError(f"{path}: holds {len(ids)} tokens, {meta_path} says "
                             f"{meta.get('num_tokens')} (truncated or altered)")
        if len(ids) and int(ids.max()) >= vocab_size:
            raise ValueError(f"{path}: token id {int(ids.max())} outside the vocabulary "
                             f"({vocab_size})")
        return cls(path, ids)

    def __len__(self):
        return len(self.ids)

    def window(self, start, length):
        return np.asarray(self.ids[start:start + length], dtype=np.int64)
