// Activation quantization and QAT written once (quant.h contracts), bound to
// one ISA's traits V by QuantKernelTable<V>() in that ISA's translation unit,
// which is compiled with the ISA's target flags; quant.cc picks the table.
//
// Per block: amax (max is exact in any order), the power-of-two scale from the
// scalar code shared with the reference, then x·(1/s) (exact: s is a power of
// two, so it rounds like x/s), the clamp, and V's branch-free e4m3 / e2m1
// rounding, which reproduces ref::E4M3FromF32 / E2M1FromF32 bit for bit.
//
// V supplies: F (FP32 vector), I (its integer twin), kLanes, LoadBf16, Set1,
// Zero, Mul, Div, Min, Max, Abs, ReduceMax, EncodeE4M3 (F -> codes in I lanes),
// kCodeVecs and StoreCodes (kCodeVecs code vectors -> kCodeVecs·kLanes bytes),
// RoundE4M3 / RoundE2M1 (the rounded value as FP32), RoundEven (to an
// integer, ties to even), StoreInt8 (integral values in [-127, 127] ->
// kLanes bytes), StoreBf16.
#pragma once

#include "kernels/cpu/quant_cpu.h"
#include "kernels/ref/quant_ref.h"

namespace dsv4::kernels::cpu {
namespace {

template <class V>
[[gnu::always_inline]] inline float BlockAmax(const bf16* x, int64_t n) {
  typename V::F amax = V::Zero();
  for (int64_t i = 0; i < n; i += V::kLanes) amax = V::Max(amax, V::Abs(V::LoadBf16(x + i)));
  return V::ReduceMax(amax);
}

// In-place quantize-dequantize of one block of n (multiple of kLanes) values:
// bf16(round(clamp(x/s, ±qmax))·s).
template <class V, typename Scale, typename Round>
[[gnu::always_inline]] inline void QatBlock(bf16* x, int64_t n, float qmax, Scale scale_of,
                                            Round round) {
  const float s = scale_of(BlockAmax<V>(x, n));
  const typename V::F inv = V::Set1(1.0f / s);  // exact: s is a power of two
  const typename V::F vs = V::Set1(s);
  const typename V::F hi = V::Set1(qmax);
  const typename V::F lo = V::Set1(-qmax);
  for (int64_t i = 0; i < n; i += V::kLanes) {
    const typename V::F q = V::Min(V::Max(V::Mul(V::LoadBf16(x + i), inv), lo), hi);
    V::StoreBf16(x + i, V::Mul(round(q), vs));
  }
}

// One block of FP8 codes and its scale.  REQUIRES: block % (kCodeVecs·kLanes) == 0.
template <class V>
void QuantizeBlock(const bf16* x, int64_t block, uint8_t* codes, float* scale) {
  constexpr int64_t kStep = V::kCodeVecs * V::kLanes;
  const float s = ref::Fp8BlockScale(BlockAmax<V>(x, block));
  const typename V::F inv = V::Set1(1.0f / s);  // exact: s is a power of two in [2^-22, 2^120]
  const typename V::F hi = V::Set1(448.0f);
  const typename V::F lo = V::Set1(-448.0f);
  for (int64_t i = 0; i < block; i += kStep) {
    typename V::I c[V::kCodeVecs];
    for (int j = 0; j < V::kCodeVecs; ++j) {
      const typename V::F q = V::Mul(V::LoadBf16(x + i + j * V::kLanes), inv);
      c[j] = V::EncodeE4M3(V::Min(V::Max(q, lo), hi));
    }
    V::StoreCodes(codes + i, c);
  }
  *scale = s;
}

template <class V>
void ActQuantFp8Rows(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                     float* scales) {
  const int64_t num_blocks = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      QuantizeBlock<V>(x + r * cols + b * block, block, codes + r * cols + b * block,
                       scales + r * num_blocks + b);
    }
  }
}

template <class V>
void KvQatFp8Rows(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nope; b += 64) {
      QatBlock<V>(x + r * cols + b, 64, 448.0f, ref::Fp8BlockScale,
                  [](typename V::F q) { return V::RoundE4M3(q); });
    }
  }
}

template <class V>
void Fp4QatRows(bf16* x, int64_t rows, int64_t cols) {
  for (int64_t i = 0; i < rows * cols; i += 32) {
    QatBlock<V>(x + i, 32, 6.0f, ref::Fp4BlockScale,
                [](typename V::F q) { return V::RoundE2M1(q); });
  }
}

// Scalar steps of the W8A8 quantizer for a row's tail, as the reference
// writes them (std::max, std::fabs, std::rint, std::clamp) but with builtins
// and local code: this header is compiled with each ISA's flags, so it must
// not instantiate std templates or the shared inline Bf16ToF32 (the linker
// could hand their AVX-512 copies to AVX2 callers).
[[gnu::always_inline]] inline float Int8TailValue(bf16 b) {
  const uint32_t u = static_cast<uint32_t>(b.bits) << 16;
  float f;
  __builtin_memcpy(&f, &u, 4);
  return f;
}
[[gnu::always_inline]] inline float Int8TailMax(float a, float b) { return a < b ? b : a; }
[[gnu::always_inline]] inline int8_t Int8TailCode(float v, float scale) {
  const float q = __builtin_rintf(v / scale);
  return static_cast<int8_t>(q < -127.0f ? -127.0f : 127.0f < q ? 127.0f : q);
}

// W8A8 per-token quantization, bit for bit ref::ActQuantInt8PerToken: the
// row's amax (NaN ignored, as std::max does), scale = max(amax, 1e-4) / 127,
// then clamp(rint(x / scale), ±127) with an IEEE division per element (so
// the same quotient as the scalar code), the rest of the row scalar.
template <class V>
void ActQuantInt8Rows(const bf16* x, int64_t rows, int64_t cols, int8_t* codes, float* scales) {
  const int64_t whole = cols / V::kLanes * V::kLanes;
  for (int64_t r = 0; r < rows; ++r) {
    const bf16* row = x + r * cols;
    typename V::F vmax = V::Zero();
    for (int64_t i = 0; i < whole; i += V::kLanes) {
      vmax = V::Max(V::Abs(V::LoadBf16(row + i)), vmax);
    }
    float amax = V::ReduceMax(vmax);
    for (int64_t i = whole; i < cols; ++i) {
      amax = Int8TailMax(amax, __builtin_fabsf(Int8TailValue(row[i])));
    }
    const float scale = Int8TailMax(amax, 1e-4f) / 127.0f;
    scales[r] = scale;
    const typename V::F vs = V::Set1(scale);
    const typename V::F hi = V::Set1(127.0f), lo = V::Set1(-127.0f);
    int8_t* out = codes + r * cols;
    for (int64_t i = 0; i < whole; i += V::kLanes) {
      const typename V::F q = V::RoundEven(V::Div(V::LoadBf16(row + i), vs));
      V::StoreInt8(out + i, V::Min(V::Max(q, lo), hi));
    }
    for (int64_t i = whole; i < cols; ++i) out[i] = Int8TailCode(Int8TailValue(row[i]), scale);
  }
}

template <class V>
constexpr QuantKernels QuantKernelTable() {
  QuantKernels k;
  k.act_quant_fp8 = &ActQuantFp8Rows<V>;
  k.kv_qat_fp8 = &KvQatFp8Rows<V>;
  k.fp4_qat = &Fp4QatRows<V>;
  k.act_quant_int8 = &ActQuantInt8Rows<V>;
  return k;
}

}  // namespace
}  // namespace dsv4::kernels::cpu
