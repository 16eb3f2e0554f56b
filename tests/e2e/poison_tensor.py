#!/usr/bin/python3
"""Overwrites BF16/F32 tensor values of a checkpoint (or sidecar) with NaN.

A corrupt-but-well-formed checkpoint for the hardening tests: the file keeps
its size, header and layout, only the values change.
  poison_tensor.py MODEL_DIR TENSOR [ROW]      every value (or one row) = NaN
  poison_tensor.py --flip FILE TENSOR          flip one bit in the middle of
                                               TENSOR's bytes in FILE
"""
import json
import os
import struct
import sys

NAN = {"BF16": b"\xc0\x7f", "F32": struct.pack("<f", float("nan"))}


def header(path):
    with open(path, "rb") as f:
        n = struct.unpack("<Q", f.read(8))[0]
        return json.loads(f.read(n)), 8 + n


def shard_of(model, tensor):
    index = os.path.join(model, "model.safetensors.index.json")
    with open(index) as f:
        return os.path.join(model, json.load(f)["weight_map"][tensor])


def main():
    if sys.argv[1] == "--flip":
        path, tensor = sys.argv[2], sys.argv[3]
        h, start = header(path)
        begin, end = h[tensor]["data_offsets"]
        at = start + (begin + end) // 2
        st = os.stat(path)
        with open(path, "r+b") as f:
            f.seek(at)
            b = f.read(1)[0]
            f.seek(at)
            f.write(bytes([b ^ 0x10]))
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
        return 0
    model, tensor = sys.argv[1], sys.argv[2]
    row = int(sys.argv[3]) if len(sys.argv) > 3 else None
    path = shard_of(model, tensor)
    h, start = header(path)
    e = h[tensor]
    nan = NAN[e["dtype"]]
    begin, end = e["data_offsets"]
    if row is not None:
        row_bytes = (end - begin) // e["shape"][0]
        begin, end = begin + row * row_bytes, begin + (row + 1) * row_bytes
    with open(path, "r+b") as f:
        f.seek(start + begin)
        f.write(nan * ((end - begin) // len(nan)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
