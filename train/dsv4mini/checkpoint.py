"""Load and export DeepSeek-V4 checkpoints in the real DeepSeek-V4-Flash HF format.

Storage per tensor (as in DeepSeek-V4-Flash):
  FP8 linears (attention wq_a/wq_b/wkv/wo_a/wo_b, indexer wq_b, shared expert, MTP
      e_proj/h_proj): `<name>.weight` F8_E4M3 [out, in] + `<name>.scale` F8_E8M0 with
      one power-of-two scale per 128x128 block;
  routed experts `ffn.experts.{e}.w{1,2,3}`: `.weight` I8 [out, in/2] (two e2m1 codes per
      byte, low nibble first) + `.scale` F8_E8M0 [out, in/32];
  BF16: embed, head, norms, router weight, compressor wkv/wgate, indexer weights_proj;
  F32: hc_*, attn_sink, ape, router bias;  I64: tid2eid (hash-routed layers).
Loading decodes everything to FP32 parameters (wo_a too: the reference dequantizes it
to BF16, which is exact).  Export writes shards + model.safetensors.index.json +
config.json into a temporary directory next to the target, fsyncs, then renames it.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile

import numpy as np
import torch

from . import quant as Q
from .config import ModelConfig
from .model import Transformer
from .safetensors_io import INDEX_FILE, SafetensorsError, StTensor, read_sharded, \
    serialize_safetensors

CONFIG_FILE = "config.json"
_EXPERT = re.compile(r"^(.*\.ffn\.experts)\.(w[123])$")


class CheckpointError(ValueError):
    pass


def _base(name: str) -> str:
    return name[:-len(".weight")] if name.endswith(".weight") else name


def checkpoint_entries(model: Transformer):
    """(parameter or buffer name, tensor, format) for everything the checkpoint holds."""
    for name, p in model.named_parameters():
        fmt = getattr(p, "ckpt_format", None)
        if fmt is None:
            raise CheckpointError(f"parameter {name} has no checkpoint format")
        yield name, p, fmt
    for name, b in model.named_buffers():
        if name.endswith("gate.bias"):
            yield name, b, "f32"
        elif name.endswith("gate.tid2eid"):
            yield name, b, "i64"


def _expected(model: Transformer) -> dict:
    """HF tensor name -> (dtype, shape) the checkpoint must hold for this model."""
    out = {}
    for name, t, fmt in checkpoint_entries(model):
        shape = tuple(t.shape)
        if fmt == "fp8":
            b = _base(name)
            out[b + ".weight"] = ("F8_E4M3", shape)
            out[b + ".scale"] = ("F8_E8M0", (-(-shape[0] // 128), -(-shape[1] // 128)))
        elif fmt == "fp4":
            prefix, w = _EXPERT.match(name).groups()
            e, o, i = shape
            for k in range(e):
                out[f"{prefix}.{k}.{w}.weight"] = ("I8", (o, i // 2))
                out[f"{prefix}.{k}.{w}.scale"] = ("F8_E8M0", (o, i // 32))
        else:
            out[name] = ({"bf16": "BF16", "f32": "F32", "i64": "I64"}[fmt], shape)
    return out


# ---------------------------------------------------------------------------------------
# Load

def _decode_float(name: str, t: StTensor) -> torch.Tensor:
    if t.dtype == "BF16":
        return torch.from_numpy(Q.bf16_bits_to_f32(t.array).copy())
    if t.dtype == "F32":
        return torch.from_numpy(t.array.astype(np.float32))
    raise CheckpointError(f"tensor {name}: cannot decode {t.dtype} as float")


def load_checkpoint(model_dir: str, numerics: str = "ref", qat: bool = False):
    """-> (cfg, model) from an HF-format DeepSeek-V4 directory (config.json + shards).
    Every tensor is checked for presence, dtype and shape; unknown tensors are refused."""
    cfg = ModelConfig.from_json_file(os.path.join(model_dir, CONFIG_FILE)).validate()
    try:
        tensors = read_sharded(model_dir)
    except (SafetensorsError, OSError) as e:
        raise CheckpointError(str(e)) from None
    model = Transformer(cfg, numerics=numerics, qat=qat, seed=None)
    expected = _expected(model)
    for name, (dtype, shape) in expected.items():
        t = tensors.get(name)
        if t is None:
            raise CheckpointError(f"{model_dir}: tensor {name} is missing")
        if t.dtype != dtype or t.shape != shape:
            raise CheckpointError(f"{model_dir}: tensor {name} is {t.dtype} {list(t.shape)}, "
                                  f"expected {dtype} {list(shape)}")
    unexpected = sorted(set(tensors) - set(expected))
    if unexpected:
        raise CheckpointError(f"{model_dir}: unexpected tensor {unexpected[0]} "
                              f"(not part of this config's model)")

    with torch.no_grad():
        for name, target, fmt in checkpoint_entries(model):
            if fmt == "fp8":
                b = _base(name)
                v = Q.fp8_weight_dequantize(tensors[b + ".weight"].array,
                                            tensors[b + ".scale"].array)
            elif fmt == "fp4":
                prefix, w = _EXPERT.match(name).groups()
                v = torch.stack([Q.fp4_weight_dequantize(
                    tensors[f"{prefix}.{k}.{w}.weight"].array,
                    tensors[f"{prefix}.{k}.{w}.scale"].array) for k in range(target.shape[0])])
            elif fmt == "i64":
                v = torch.from_numpy(tensors[name].array.astype(np.int64))
                _check_tid2eid(model_dir, name, v, cfg.n_routed_experts)
            else:
                v = _decode_float(name, tensors[name])
            if not torch.isfinite(v.float()).all():
                raise CheckpointError(f"{model_dir}: tensor {name} holds NaN or infinity")
            target.copy_(v)
    return cfg, model


def _check_tid2eid(model_dir, name, v: torch.Tensor, n_experts: int):
    if int(v.min()) < 0 or int(v.max()) >= n_experts:
        raise CheckpointError(f"{model_dir}: tensor {name}: expert ids must be in "
                              f"[0, {n_experts})")
    s = v.sort(-1).values
    if (s[:, 1:] == s[:, :-1]).any():
        row = int((s[:, 1:] == s[:, :-1]).any(-1).nonzero()[0])
        raise CheckpointError(f"{model_dir}: tensor {name}: row {row} repeats an expert id")


# ---------------------------------------------------------------------------------------
# Export

def checkpoint_tensors(model: Transformer) -> dict[str, StTensor]:
    """HF name -> stored tensor, quantized exactly as DeepSeek-V4-Flash stores it."""
    out = {}
    with torch.no_grad():
        for name, t, fmt in checkpoint_entries(model):
            t = t.detach().cpu()
            if fmt == "fp8":
                codes, scale = Q.fp8_weight_quantize(t)
                b = _base(name)
                out[b + ".weight"] = StTensor("F8_E4M3", codes)
                out[b + ".scale"] = StTensor("F8_E8M0", scale)
            elif fmt == "fp4":
                prefix, w = _EXPERT.match(name).groups()
                for k in range(t.shape[0]):
                    packed, scale = Q.fp4_weight_quantize(t[k])
                    out[f"{prefix}.{k}.{w}.weight"] = StTensor("I8", packed)
                    out[f"{prefix}.{k}.{w}.scale"] = StTensor("F8_E8M0", scale)
            elif fmt == "bf16":
                out[name] = StTensor("BF16", Q.f32_to_bf16_bits(t.float().numpy()))
            elif fmt == "f32":
                out[name] = StTensor("F32", t.float().numpy().astype("<f4"))
            elif fmt == "i64":
                out[name] = StTensor("I64", t.numpy().astype("<i8"))
            else:
                raise CheckpointError(f"parameter {name}: unknown format {fmt}")
    return out


def _sort_key(name: str):
    """Canonical order: embed, layers by index, the rest, then mtp; numbers numerically."""
    group = 0 if name.startswith("embed") else 1 if name.startswith("layers.") else \
        3 if name.startswith("mtp.") else 2
    return (group, [int(p) if p.isdigit() else p for p in re.split(r"(\d+)", name)])


def _shards(tensors: dict[str, StTensor], max_shard_bytes: int) -> list[list[str]]:
    """Greedy packing in canonical order; the MTP tensors start a shard of their own."""
    shards: list[list[str]] = [[]]
    size = 0
    for name in sorted(tensors, key=_sort_key):
        nbytes = tensors[name].array.nbytes
        new_mtp = name.startswith("mtp.") and shards[-1] and not shards[-1][-1].startswith("mtp.")
        if shards[-1] and (size + nbytes > max_shard_bytes or new_mtp):
            shards.append([])
            size = 0
        shards[-1].append(name)
        size += nbytes
    return shards


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def export_checkpoint(model: Transformer, cfg: ModelConfig, out_dir: str,
                      extra_files: dict | None = None, max_shard_bytes: int = 4 << 30,
                      overwrite: bool = False) -> str:
    """Writes the model as an HF DeepSeek-V4 checkpoint directory `out_dir`:
    model-0000i-of-0000N.safetensors, model.safetensors.index.json, config.json and
    `extra_files` (name -> bytes, e.g. the tokenizer).  Atomic: everything is written
    and fsynced in a temporary sibling directory that is then renamed to `out_dir`; an
    interrupted export leaves no `out_dir` (a leftover `.<name>.tmp-*` sibling at most).
    With overwrite=True an existing `out_dir` is replaced (moved aside, then deleted)."""
    cfg.validate()
    extra_files = dict(extra_files or {})
    reserved = {CONFIG_FILE, INDEX_FILE}
    for name, data in extra_files.items():
        if (not isinstance(name, str) or not name or os.path.basename(name) != name
                or name.startswith(".") or name in reserved
                or re.fullmatch(r"model-\d+-of-\d+\.safetensors", name)):
            raise CheckpointError(f"extra file name {name!r} is not allowed")
        if not isinstance(data, (bytes, bytearray)):
            raise CheckpointError(f"extra file {name}: content must be bytes")
    out_dir = os.path.abspath(out_dir)
    if os.path.exists(out_dir) and not overwrite:
        raise FileExistsError(f"{out_dir} exists (pass overwrite=True to replace it)")
    parent = os.path.dirname(out_dir)
    os.makedirs(parent, exist_ok=True)

    tensors = checkpoint_tensors(model)
    shards = _shards(tensors, max_shard_bytes)
    tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.tmp-", dir=parent)
    try:
        weight_map, total = {}, 0
        for i, names in enumerate(shards):
            fname = f"model-{i + 1:05d}-of-{len(shards):05d}.safetensors"
            part = {n: tensors[n] for n in sorted(names)}
            _write_file(os.path.join(tmp, fname), serialize_safetensors(part, {"format": "pt"}))
            for n in names:
                weight_map[n] = fname
                total += tensors[n].array.nbytes
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        _write_file(os.path.join(tmp, INDEX_FILE), (json.dumps(index, indent=2) + "\n").encode())
        _write_file(os.path.join(tmp, CONFIG_FILE), cfg.to_json().encode())
        for name, data in extra_files.items():
            _write_file(os.path.join(tmp, name), bytes(data))
        os.chmod(tmp, 0o755)
        _fsync_dir(tmp)
        old = None
        if os.path.exists(out_dir):
            old = tempfile.mkdtemp(prefix=f".{os.path.basename(out_dir)}.old-", dir=parent)
            os.rename(out_dir, os.path.join(old, "model"))
        os.rename(tmp, out_dir)
        _fsync_dir(parent)
        if old:
            shutil.rmtree(old, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return out_dir
