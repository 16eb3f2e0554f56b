"""Number formats of the DeepSeek-V4 checkpoint and of the reference's rounding points.

Formats (all round-to-nearest-even, saturating after the clamp):
  BF16          top 16 bits of an FP32 value.
  FP8 e4m3      1-4-3 bits, bias 7, max 448, subnormal step 2^-9, no infinities; codes
                0x7F/0xFF are NaN and 0x80 is -0 (decodes to 0).
  FP4 e2m1      grid 0, .5, 1, 1.5, 2, 3, 4, 6 with a sign bit (bit 3).
  E8M0          one byte b = 2^(b-127), b = 255 is NaN.
Checkpoint layouts: dense FP8 weights [out, in] with one E8M0 scale per 128x128 block
([ceil(out/128), ceil(in/128)]); routed experts MXFP4, two e2m1 codes per byte along the
input dim (low nibble = element 2j) and one E8M0 scale per 32 inputs ([out, in/32]).

Scales.  Activations (the reference's `act_quant`/`fp4_act_quant`): the power of two
2^ceil(log2(max(amax, floor) * fp32(1/max))), the ceil taken from the IEEE bits of the
FP32 product.  Weights (our writer): the smallest power of two s with amax <= max * s,
computed exactly, so re-quantizing an already quantized weight reproduces its values.

Torch functions work on FP32 tensors and are vectorised; code/byte conversions return
numpy arrays in the checkpoint's storage dtypes.
"""

from __future__ import annotations

import numpy as np
import torch

E4M3_MAX = 448.0
E2M1_MAX = 6.0
FP8_BLOCK = 128          # weight block (both dims) and activation block
FP4_BLOCK = 32           # expert weight scale block along the input dim
KV_BLOCK = 64            # KV QAT block
INDEX_BLOCK = 32         # indexer FP4 QAT block

_F32 = torch.float32
# FP32 constants exactly as the reference kernels use them.
_INV_E4M3 = torch.tensor(1.0 / 448.0, dtype=_F32)
_INV_E2M1 = torch.tensor(1.0 / 6.0, dtype=_F32)
_FLOOR_FP8 = torch.tensor(1e-4, dtype=_F32)
_FLOOR_FP4 = torch.tensor(6.0 * 2.0 ** -126, dtype=_F32)


# ---------------------------------------------------------------------------------------
# BF16

def bf16_round(x: torch.Tensor) -> torch.Tensor:
    """FP32 -> nearest BF16 (ties to even) -> FP32."""
    return x.to(torch.bfloat16).to(_F32)


def bf16_bits_to_f32(bits: np.ndarray) -> np.ndarray:
    return (np.asarray(bits, dtype=np.uint16).astype(np.uint32) << 16).view(np.float32)


def f32_to_bf16_bits(x: np.ndarray) -> np.ndarray:
    """Round to nearest even; NaN stays a (quiet) NaN."""
    x = np.ascontiguousarray(x, dtype=np.float32)
    b = x.view(np.uint32).astype(np.uint64)
    r = ((b + 0x7FFF + ((b >> 16) & 1)) >> 16).astype(np.uint16)
    r[np.isnan(x)] = 0x7FC0
    return r


# ---------------------------------------------------------------------------------------
# Element formats

def _e4m3_table() -> np.ndarray:
    t = np.zeros(256, dtype=np.float32)
    for c in range(256):
        e, m = (c >> 3) & 0xF, c & 7
        v = m * 2.0 ** -9 if e == 0 else (1 + m / 8) * 2.0 ** (e - 7)
        t[c] = -v if c & 0x80 else v
    t[0x7F] = t[0xFF] = np.nan
    return t


E4M3_VALUES = _e4m3_table()
E2M1_VALUES = np.array([0, .5, 1, 1.5, 2, 3, 4, 6, -0.0, -.5, -1, -1.5, -2, -3, -4, -6],
                       dtype=np.float32)
_E4M3_POS = E4M3_VALUES[:0x7F]          # codes 0..126, ascending
_E2M1_POS = E2M1_VALUES[:8]


def _pow2(e: torch.Tensor) -> torch.Tensor:
    return torch.ldexp(torch.ones((), dtype=_F32), e.to(torch.int32))


def _round_to_grid(a: torch.Tensor, min_exp: int, mant_bits: int) -> torch.Tensor:
    """Nearest-even rounding of non-negative `a` to a float grid with `mant_bits`
    explicit mantissa bits and smallest normal exponent `min_exp`."""
    _, e = torch.frexp(a)                        # a = f * 2^e, f in [0.5, 1)
    e = (e - 1).clamp(min=min_exp)
    step = _pow2(e - mant_bits)
    return torch.round(a / step) * step          # torch.round is half-to-even


def e4m3_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest e4m3 value, saturating at +-448; the sign is kept (-0 for tiny negatives)."""
    x = x.to(_F32)
    return torch.copysign(_round_to_grid(x.abs().clamp(max=E4M3_MAX), -6, 3), x)


def e2m1_round(x: torch.Tensor) -> torch.Tensor:
    """Nearest e2m1 value, saturating at +-6; the sign is kept."""
    x = x.to(_F32)
    return torch.copysign(_round_to_grid(x.abs().clamp(max=E2M1_MAX), 0, 1), x)


def _encode(values: np.ndarray, positive: np.ndarray, sign_bit: int, what: str) -> np.ndarray:
    v = np.asarray(values, dtype=np.float32)
    a = np.abs(v)
    idx = np.searchsorted(positive, a)
    idx = np.minimum(idx, len(positive) - 1)
    if not np.array_equal(positive[idx], a):
        bad = np.flatnonzero(positive[idx] != a)[0]
        raise ValueError(f"{what}: value {v.flat[bad]!r} is not on the grid")
    return (idx | (np.signbit(v).astype(np.int64) << sign_bit)).astype(np.uint8)


def e4m3_encode(values) -> np.ndarray:
    """Codes of values already on the e4m3 grid (e.g. from e4m3_round)."""
    return _encode(_np(values), _E4M3_POS, 7, "e4m3")


def e2m1_encode(values) -> np.ndarray:
    """4-bit codes (one per uint8) of values already on the e2m1 grid."""
    return _encode(_np(values), _E2M1_POS, 3, "e2m1")


def e4m3_decode(codes) -> torch.Tensor:
    return torch.from_numpy(E4M3_VALUES[np.asarray(codes, dtype=np.uint8)])


def e2m1_decode(codes) -> torch.Tensor:
    return torch.from_numpy(E2M1_VALUES[np.asarray(codes, dtype=np.uint8) & 0xF])


def e8m0_decode(scale_bytes) -> torch.Tensor:
    b = np.asarray(scale_bytes, dtype=np.uint8).astype(np.int32)
    v = np.ldexp(np.float32(1.0), b - 127).astype(np.float32)
    v[b == 255] = np.nan
    return torch.from_numpy(v)


def e8m0_encode(scale: torch.Tensor) -> np.ndarray:
    """Bytes of power-of-two scales 2^-127 .. 2^127."""
    s = _np(scale).astype(np.float64)
    m, e = np.frexp(s)
    if not (np.all(m == 0.5) and np.all((e - 1 >= -127) & (e - 1 <= 127))):
        raise ValueError("e8m0: scales must be powers of two in [2^-127, 2^127]")
    return (e - 1 + 127).astype(np.uint8)


def _np(x) -> np.ndarray:
    return x.detach().cpu().numpy() if isinstance(x, torch.Tensor) else np.asarray(x)


# ---------------------------------------------------------------------------------------
# Scales

def act_scale_exp(amax: torch.Tensor, floor: torch.Tensor, inv_max: torch.Tensor):
    """The reference's exponent: ceil(log2(max(amax, floor) * inv_max)) from the FP32 bits."""
    p = torch.maximum(amax.to(_F32), floor) * inv_max
    bits = p.view(torch.int32)
    return ((bits >> 23) & 0xFF) - 127 + ((bits & 0x7FFFFF) != 0).to(torch.int32)


def weight_scale_exp(amax: torch.Tensor, max_value: float) -> torch.Tensor:
    """Smallest e with amax <= max_value * 2^e, exactly (0 for all-zero blocks)."""
    a = amax.detach().to(torch.float64)
    pos = a > 0
    e = torch.ceil(torch.log2(torch.where(pos, a, torch.ones_like(a)) / max_value))
    e = torch.where(a > max_value * torch.exp2(e), e + 1, e)
    e = torch.where(a <= max_value * torch.exp2(e - 1), e - 1, e)
    e = torch.where(pos, e, torch.zeros_like(e))
    return e.clamp(-127, 127).to(torch.int32)


# ---------------------------------------------------------------------------------------
# Activation quantization (reference rounding points)

def _blocks(x: torch.Tensor, block: int) -> torch.Tensor:
    k = x.shape[-1]
    if k % block:
        raise ValueError(f"last dim {k} is not a multiple of the quantization block {block}")
    return x.reshape(*x.shape[:-1], k // block, block)


def fp8_act_quant(x: torch.Tensor, block: int = FP8_BLOCK):
    """Per row and `block` channels: (q on the e4m3 grid [..., K], scale [..., K/block])."""
    xb = _blocks(x.to(_F32), block)
    s = _pow2(act_scale_exp(xb.abs().amax(-1), _FLOOR_FP8, _INV_E4M3))
    q = e4m3_round((xb / s.unsqueeze(-1)).clamp(-E4M3_MAX, E4M3_MAX))
    return q.reshape(x.shape), s


def fp8_act_qdq(x: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    """q * s of fp8_act_quant (exact in FP32): what an FP8 GEMM effectively multiplies."""
    xb = _blocks(x.to(_F32), block)
    s = _pow2(act_scale_exp(xb.abs().amax(-1), _FLOOR_FP8, _INV_E4M3)).unsqueeze(-1)
    return (e4m3_round((xb / s).clamp(-E4M3_MAX, E4M3_MAX)) * s).reshape(x.shape)


def fp4_act_quant(x: torch.Tensor, block: int = INDEX_BLOCK):
    xb = _blocks(x.to(_F32), block)
    s = _pow2(act_scale_exp(xb.abs().amax(-1), _FLOOR_FP4, _INV_E2M1))
    q = e2m1_round((xb / s.unsqueeze(-1)).clamp(-E2M1_MAX, E2M1_MAX))
    return q.reshape(x.shape), s


def fp4_act_qdq(x: torch.Tensor, block: int = INDEX_BLOCK) -> torch.Tensor:
    xb = _blocks(x.to(_F32), block)
    s = _pow2(act_scale_exp(xb.abs().amax(-1), _FLOOR_FP4, _INV_E2M1)).unsqueeze(-1)
    return (e2m1_round((xb / s).clamp(-E2M1_MAX, E2M1_MAX)) * s).reshape(x.shape)


def hadamard(x: torch.Tensor) -> torch.Tensor:
    """Walsh-Hadamard transform over the last dim (a power of two), Sylvester (natural)
    order, scaled by n^-0.5: the butterfly H_2n = [[H_n, H_n], [H_n, -H_n]]."""
    n = x.shape[-1]
    if n & (n - 1):
        raise ValueError(f"Hadamard size {n} is not a power of two")
    y = x.reshape(-1, n)
    h = 1
    while h < n:
        y = y.reshape(-1, n // (2 * h), 2, h)
        a, b = y[:, :, 0, :], y[:, :, 1, :]
        y = torch.stack((a + b, a - b), dim=2)
        h *= 2
    return y.reshape(x.shape) * torch.tensor(n ** -0.5, dtype=_F32)


# ---------------------------------------------------------------------------------------
# Weight quantization (checkpoint formats)

def _pad_to(w: torch.Tensor, rows: int, cols: int) -> torch.Tensor:
    r, c = w.shape
    if r == rows and c == cols:
        return w
    return torch.nn.functional.pad(w, (0, cols - c, 0, rows - r))


def _fp8_block_scales(w: torch.Tensor):
    out, inp = w.shape
    ob, ib = -(-out // FP8_BLOCK), -(-inp // FP8_BLOCK)
    wp = _pad_to(w, ob * FP8_BLOCK, ib * FP8_BLOCK).reshape(ob, FP8_BLOCK, ib, FP8_BLOCK)
    e = weight_scale_exp(wp.abs().amax(dim=(1, 3)), E4M3_MAX)
    s = _pow2(e)
    full = s.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:out, :inp]
    return s, full


def fp8_weight_qdq(w: torch.Tensor) -> torch.Tensor:
    """Values an FP8 128x128-block export of `w` [out, in] decodes to."""
    w = w.detach().to(_F32)
    _, full = _fp8_block_scales(w)
    return e4m3_round(w / full) * full


def fp8_weight_quantize(w: torch.Tensor):
    """[out, in] -> (e4m3 codes uint8 [out, in], E8M0 bytes [ceil(out/128), ceil(in/128)])."""
    w = w.detach().to(_F32)
    s, full = _fp8_block_scales(w)
    return e4m3_encode(e4m3_round(w / full)), e8m0_encode(s)


def fp8_weight_dequantize(codes, scale_bytes) -> torch.Tensor:
    codes = np.asarray(codes)
    out, inp = codes.shape
    s = e8m0_decode(scale_bytes)
    ob, ib = -(-out // FP8_BLOCK), -(-inp // FP8_BLOCK)
    if tuple(s.shape) != (ob, ib):
        raise ValueError(f"scale shape {tuple(s.shape)} does not match weight {codes.shape} "
                         f"(expected {(ob, ib)})")
    full = s.repeat_interleave(FP8_BLOCK, 0).repeat_interleave(FP8_BLOCK, 1)[:out, :inp]
    return e4m3_decode(codes) * full


def _fp4_scales(w: torch.Tensor) -> torch.Tensor:
    wb = _blocks(w, FP4_BLOCK)
    return _pow2(weight_scale_exp(wb.abs().amax(-1), E2M1_MAX))


def fp4_weight_qdq(w: torch.Tensor) -> torch.Tensor:
    """Values an MXFP4 export of `w` [..., in] decodes to (per 32 along the last dim)."""
    w = w.detach().to(_F32)
    wb = _blocks(w, FP4_BLOCK)
    s = _fp4_scales(w).unsqueeze(-1)
    return (e2m1_round(wb / s) * s).reshape(w.shape)


def fp4_weight_quantize(w: torch.Tensor):
    """[out, in] -> (packed int8 [out, in/2] low nibble = element 2j, E8M0 bytes [out, in/32])."""
    w = w.detach().to(_F32)
    s = _fp4_scales(w)
    codes = e2m1_encode(e2m1_round(_blocks(w, FP4_BLOCK) / s.unsqueeze(-1))).reshape(w.shape)
    packed = (codes[..., 0::2] | (codes[..., 1::2] << 4)).astype(np.uint8)
    return packed.view(np.int8), e8m0_encode(s)


def fp4_weight_dequantize(packed, scale_bytes) -> torch.Tensor:
    p = np.asarray(packed).view(np.uint8)
    out, half = p.shape
    codes = np.empty((out, 2 * half), dtype=np.uint8)
    codes[:, 0::2] = p & 0xF
    codes[:, 1::2] = p >> 4
    s = e8m0_decode(scale_bytes)
    if tuple(s.shape) != (out, 2 * half // FP4_BLOCK) or (2 * half) % FP4_BLOCK:
        raise ValueError(f"scale shape {tuple(s.shape)} does not match packed weight "
                         f"{p.shape} (expected {(out, 2 * half // FP4_BLOCK)})")
    return (e2m1_decode(codes).reshape(out, -1, FP4_BLOCK) * s.unsqueeze(-1)).reshape(out, -1)


# ---------------------------------------------------------------------------------------
# Quantization-aware training

def ste(x: torch.Tensor, xq: torch.Tensor) -> torch.Tensor:
    """Straight-through estimator: the value of xq, the gradient of the identity."""
    return x + (xq - x).detach()


def fake_quant_fp8_weight(w: torch.Tensor) -> torch.Tensor:
    return ste(w, fp8_weight_qdq(w))


def fake_quant_fp4_weight(w: torch.Tensor) -> torch.Tensor:
    return ste(w, fp4_weight_qdq(w))


def fake_quant_fp8_act(x: torch.Tensor, block: int = FP8_BLOCK) -> torch.Tensor:
    return ste(x, fp8_act_qdq(x.detach(), block))
