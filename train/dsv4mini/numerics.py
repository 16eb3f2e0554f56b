"""The rounding points of the DeepSeek-V4 reference forward, as switchable functions.

The model calls these at every point where the official reference rounds (BF16 stores,
FP8 activation quantization before each FP8/FP4 GEMM, the KV and indexer QAT, the
per-head query RMS).  One model, three behaviours:

  ref    reproduces the reference's arithmetic (golden checks, export validation);
  train  plain FP32, differentiable, no rounding points (fast training);
  train + bf16 matmuls
         the same, with the large matrix products (projections, experts, head, attention
         scores and values) computed from BF16 copies of their operands with FP32
         accumulation and an FP32 result: mixed-precision training.  On CPUs with
         AVX512-BF16 this is ~10x the FP32 GEMM rate (docs/training.md); master weights,
         optimiser state, norms, softmax, routing scores and mHC stay FP32.
  train + qat
         FP32 with fake quantization and a straight-through estimator at the points
         where the exported checkpoint or the inference engine quantizes (FP8 weights in
         128x128 blocks, FP4 experts per 32, BF16-stored weights, FP8 activations per 128,
         KV FP8 QAT, indexer FP4 QAT).  The BF16 activation stores are not simulated:
         they are far below the FP8 noise.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from . import quant as Q

MODES = ("ref", "train")


class Numerics:
    def __init__(self, mode: str = "train", qat: bool = False, bf16_matmul: bool = False):
        if mode not in MODES:
            raise ValueError(f"numerics must be one of {MODES}, got {mode!r}")
        if mode == "ref" and qat:
            raise ValueError("qat applies to numerics='train' (ref already quantizes)")
        if mode == "ref" and bf16_matmul:
            raise ValueError("bf16_matmul applies to numerics='train' (ref follows the "
                             "reference's arithmetic)")
        self.mode = mode
        self.qat = qat
        self.bf16_matmul = bf16_matmul

    @property
    def ref(self) -> bool:
        return self.mode == "ref"

    def __repr__(self):
        return f"Numerics({self.mode!r}, qat={self.qat}, bf16_matmul={self.bf16_matmul})"

    # Matrix products -----------------------------------------------------------------
    def linear(self, x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
        """x @ w.T, from BF16 operands when bf16_matmul is on (FP32 result)."""
        if self.bf16_matmul:
            return F.linear(x.bfloat16(), w.bfloat16()).float()
        return F.linear(x, w)

    def matmul(self, a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
        """a @ b, from BF16 operands when bf16_matmul is on (FP32 result)."""
        if self.bf16_matmul:
            return torch.matmul(a.bfloat16(), b.bfloat16()).float()
        return torch.matmul(a, b)

    # Activation stores -------------------------------------------------------------
    def bf16(self, x: torch.Tensor) -> torch.Tensor:
        """A BF16 store of the reference."""
        return Q.bf16_round(x) if self.ref else x

    def act(self, x: torch.Tensor) -> torch.Tensor:
        """The activation an FP8/FP4 GEMM consumes: per token per 128 channels to e4m3."""
        if self.ref:
            return Q.fp8_act_qdq(x)
        if self.qat:
            return Q.fake_quant_fp8_act(x)
        return x

    # Weights -----------------------------------------------------------------------
    def fp8_weight(self, w: torch.Tensor) -> torch.Tensor:
        """A weight the checkpoint stores as FP8 with 128x128 block scales.  In ref mode
        the parameter already holds the decoded checkpoint values."""
        return Q.fake_quant_fp8_weight(w) if self.qat else w

    def fp4_weight(self, w: torch.Tensor) -> torch.Tensor:
        """A routed-expert weight stored as MXFP4 (per 32 along the input dim)."""
        return Q.fake_quant_fp4_weight(w) if self.qat else w

    def bf16_weight(self, w: torch.Tensor) -> torch.Tensor:
        """A weight the checkpoint stores as BF16."""
        return Q.ste(w, Q.bf16_round(w.detach())) if self.qat else w

    # QAT points of the reference -----------------------------------------------------
    def kv_qat(self, kv: torch.Tensor, rope_dim: int) -> torch.Tensor:
        """Raw-window KV and attention-compressor entries: the non-RoPE dims go through
        FP8 e4m3 in blocks of 64 (quantize-dequantize); the RoPE dims stay."""
        if not (self.ref or self.qat):
            return kv
        nope = kv[..., :-rope_dim]
        q = Q.fp8_act_qdq(nope.detach(), Q.KV_BLOCK)
        nope = Q.bf16_round(q) if self.ref else Q.ste(nope, q)
        return torch.cat((nope, kv[..., -rope_dim:]), dim=-1)

    def index_qat(self, x: torch.Tensor) -> torch.Tensor:
        """Indexer queries and keys: Hadamard rotation, then FP4 e2m1 per 32.  Without
        quantization the rotation is skipped: it is orthogonal and applied to both sides
        of every indexer dot product, so the scores do not change."""
        if self.ref:
            h = Q.bf16_round(Q.hadamard(x))
            return Q.bf16_round(Q.fp4_act_qdq(h))
        if self.qat:
            h = Q.hadamard(x)
            return Q.ste(h, Q.fp4_act_qdq(h.detach()))
        return x

    def head_rms(self, q: torch.Tensor, eps: float) -> torch.Tensor:
        """Unweighted RMS normalization of each query head.  The reference does it with
        BF16 tensor ops: five roundings."""
        if not self.ref:
            return q * torch.rsqrt((q * q).mean(-1, keepdim=True) + eps)
        sq = Q.bf16_round(q * q)
        ms = Q.bf16_round(sq.sum(-1, keepdim=True) / q.shape[-1])
        ms = Q.bf16_round(ms + torch.tensor(eps, dtype=torch.float32))
        r = Q.bf16_round(torch.rsqrt(ms))
        return Q.bf16_round(q * r)
