"""Safetensors read/write with numpy only, and the sharded HF checkpoint layout.

The format: 8-byte little-endian header length, a JSON header mapping each tensor
name to {dtype, shape, data_offsets=[begin, end)} relative to the byte after the
header (plus an optional "__metadata__" of string->string), then the raw bytes.
Tensors are kept as raw storage arrays (BF16 as uint16 bits, FP8 and E8M0 as
uint8 codes) so nothing is converted on the way through; quant.py decodes them.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass

import numpy as np

# safetensors dtype name -> numpy storage dtype (little-endian).
STORAGE = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),
    "F8_E4M3": np.dtype("u1"),
    "F8_E8M0": np.dtype("u1"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "I16": np.dtype("<i2"),
    "I32": np.dtype("<i4"),
    "I64": np.dtype("<i8"),
    "BOOL": np.dtype("?"),
}

# Refuse absurd headers before parsing them (the real Flash shards have < 1 MB).
MAX_HEADER_BYTES = 100 << 20


class SafetensorsError(ValueError):
    """A malformed file or a tensor that does not match what was asked for."""


@dataclass
class StTensor:
    """One tensor as stored: safetensors dtype name, shape, storage array."""

    dtype: str
    array: np.ndarray

    def __post_init__(self):
        if self.dtype not in STORAGE:
            raise SafetensorsError(f"unknown safetensors dtype {self.dtype!r}")
        want = STORAGE[self.dtype]
        if self.array.dtype != want:
            raise SafetensorsError(
                f"{self.dtype} tensor needs numpy storage {want}, got {self.array.dtype}")

    @property
    def shape(self) -> tuple:
        return tuple(self.array.shape)


def _read_header(f, path: str, file_size: int) -> tuple[dict, int]:
    raw = f.read(8)
    if len(raw) != 8:
        raise SafetensorsError(f"{path}: file too short for a safetensors header")
    (n,) = struct.unpack("<Q", raw)
    if n > MAX_HEADER_BYTES or 8 + n > file_size:
        raise SafetensorsError(f"{path}: header length {n} does not fit the file ({file_size} B)")
    try:
        header = json.loads(f.read(n).decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{path}: header is not valid JSON: {e}") from None
    if not isinstance(header, dict):
        raise SafetensorsError(f"{path}: header is not a JSON object")
    return header, 8 + n


def read_header(path: str) -> dict:
    """The JSON header (name -> {dtype, shape, data_offsets}) without the data."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header, _ = _read_header(f, path, size)
    return header


def read_safetensors(path: str, names=None) -> dict[str, StTensor]:
    """Reads every tensor (or only `names`) of one file into memory."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        header, data_start = _read_header(f, path, size)
        data_len = size - data_start
        out = {}
        wanted = None if names is None else set(names)
        spans = []
        for name, info in header.items():
            if name == "__metadata__":
                continue
            if not isinstance(info, dict):
                raise SafetensorsError(f"{path}: tensor {name}: header entry is not an object")
            dtype = info.get("dtype")
            shape = info.get("shape")
            offs = info.get("data_offsets")
            if dtype not in STORAGE:
                raise SafetensorsError(f"{path}: tensor {name}: unsupported dtype {dtype!r}")
            if (not isinstance(shape, list)
                    or not all(isinstance(d, int) and d >= 0 for d in shape)):
                raise SafetensorsError(f"{path}: tensor {name}: bad shape {shape!r}")
            if (not isinstance(offs, list) or len(offs) != 2
                    or not all(isinstance(o, int) for o in offs)
                    or not 0 <= offs[0] <= offs[1] <= data_len):
                raise SafetensorsError(
                    f"{path}: tensor {name}: data_offsets {offs!r} outside the data "
                    f"section ({data_len} B)")
            numel = int(np.prod(shape, dtype=np.int64))
            nbytes = numel * STORAGE[dtype].itemsize
            if offs[1] - offs[0] != nbytes:
                raise SafetensorsError(
                    f"{path}: tensor {name}: {offs[1] - offs[0]} bytes for {dtype} {shape} "
                    f"(expected {nbytes})")
            spans.append((offs[0], offs[1], name))
            if wanted is not None and name not in wanted:
                continue
            f.seek(data_start + offs[0])
            buf = f.read(nbytes)
            if len(buf) != nbytes:
                raise SafetensorsError(f"{path}: tensor {name}: truncated data")
            arr = np.frombuffer(buf, dtype=STORAGE[dtype]).reshape(shape).copy()
            out[name] = StTensor(dtype, arr)
        spans.sort()
        for (b0, e0, n0), (b1, _, n1) in zip(spans, spans[1:]):
            if b1 < e0:
                raise SafetensorsError(f"{path}: tensors {n0} and {n1} overlap")
        if wanted is not None:
            missing = wanted - set(out)
            if missing:
                raise SafetensorsError(f"{path}: no tensor {sorted(missing)[0]}")
    return out


def read_metadata(path: str) -> dict:
    meta = read_header(path).get("__metadata__", {})
    return meta if isinstance(meta, dict) else {}


def serialize_safetensors(tensors: dict[str, StTensor], metadata: dict | None = None) -> bytes:
    """The bytes of a safetensors file holding `tensors` in the given order."""
    header = {}
    if metadata:
        if not all(isinstance(k, str) and isinstance(v, str) for k, v in metadata.items()):
            raise SafetensorsError("metadata must map strings to strings")
        header["__metadata__"] = dict(metadata)
    offset = 0
    blobs = []
    for name, t in tensors.items():
        if not isinstance(t, StTensor):
            raise SafetensorsError(f"tensor {name}: expected StTensor, got {type(t).__name__}")
        data = np.ascontiguousarray(t.array).tobytes()
        header[name] = {"dtype": t.dtype, "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
        blobs.append(data)
    hjson = json.dumps(header, separators=(",", ":")).encode("utf-8")
    hjson += b" " * ((8 - len(hjson) % 8) % 8)  # data section 8-byte aligned
    return struct.pack("<Q", len(hjson)) + hjson + b"".join(blobs)


def write_safetensors(path: str, tensors: dict[str, StTensor], metadata: dict | None = None,
                      fsync: bool = False) -> int:
    """Writes one file; returns the number of tensor data bytes."""
    blob = serialize_safetensors(tensors, metadata)
    with open(path, "wb") as f:
        f.write(blob)
        if fsync:
            f.flush()
            os.fsync(f.fileno())
    return sum(t.array.nbytes for t in tensors.values())


INDEX_FILE = "model.safetensors.index.json"


def read_sharded(model_dir: str) -> dict[str, StTensor]:
    """All tensors of an HF checkpoint directory: model.safetensors.index.json
    (weight_map name -> shard) or a single model.safetensors.  Every tensor the
    index names must be in its shard, and no shard may hold unlisted tensors."""
    index_path = os.path.join(model_dir, INDEX_FILE)
    if not os.path.exists(index_path):
        single = os.path.join(model_dir, "model.safetensors")
        if os.path.exists(single):
            return read_safetensors(single)
        raise SafetensorsError(f"{model_dir}: neither {INDEX_FILE} nor model.safetensors")
    try:
        with open(index_path, encoding="utf-8") as f:
            index = json.load(f)
    except (OSError, json.JSONDecodeError) as e:
        raise SafetensorsError(f"{index_path}: cannot read: {e}") from None
    wmap = index.get("weight_map") if isinstance(index, dict) else None
    if not isinstance(wmap, dict) or not wmap:
        raise SafetensorsError(f"{index_path}: no weight_map")
    by_shard: dict[str, list[str]] = {}
    for name, shard in wmap.items():
        if not isinstance(shard, str) or os.path.basename(shard) != shard:
            raise SafetensorsError(f"{index_path}: tensor {name}: bad shard name {shard!r}")
        by_shard.setdefault(shard, []).append(name)
    out: dict[str, StTensor] = {}
    for shard, names in sorted(by_shard.items()):
        path = os.path.join(model_dir, shard)
        if not os.path.exists(path):
            raise SafetensorsError(f"{index_path}: shard {shard} (tensor {names[0]}) is missing")
        present = set(read_header(path)) - {"__metadata__"}
        missing = sorted(set(names) - present)
        if missing:
            raise SafetensorsError(f"{path}: tensor {missing[0]} listed in {INDEX_FILE} "
                                   f"is not in the shard")
        extra = sorted(present - set(names))
        if extra:
            raise SafetensorsError(f"{path}: tensor {extra[0]} is not listed in {INDEX_FILE}")
        out.update(read_safetensors(path))
    return out
