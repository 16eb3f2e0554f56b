#include "kernels/ref/quant_ref.h"

#include <cmath>
#include <cstring>

#include "base/logging.h"

namespace dsv4::kernels::ref {

namespace {

constexpr float kE4M3Max = 448.0f;
constexpr float kE2M1Max = 6.0f;

// Power of two 2^ceil(log2(p)) read off the FP32 bits of p, as the
// reference's fast_log2_ceil/fast_pow2 do (p is normal: the floors keep it so).
float CeilPow2FromBits(float p) {
  const uint32_t bits = F32ToBits(p);
  const int e = static_cast<int>((bits >> 23) & 0xffu) - 127 + ((bits & 0x7fffffu) != 0 ? 1 : 0);
  return BitsToF32(static_cast<uint32_t>(e + 127) << 23);
}

// Largest |x| of n BF16 values; -0 and +0 both count as 0.
float AbsMax(const bf16* x, int64_t n) {
  float amax = 0.0f;
  for (int64_t i = 0; i < n; ++i) amax = std::fmax(amax, std::fabs(Bf16ToF32(x[i])));
  return amax;
}

}  // namespace

uint8_t E4M3FromF32(float x) {
  const uint32_t sign = (F32ToBits(x) >> 24) & 0x80u;
  const float a = std::fabs(x);
  if (std::isnan(a)) return static_cast<uint8_t>(sign | 0x7fu);
  if (a >= kE4M3Max) return static_cast<uint8_t>(sign | 0x7eu);
  if (a < 0x1p-6f) {
    // Subnormal range, spacing 2^-9: a·2^9 is exact, nearbyint rounds half to
    // even in the default mode; 8 lands on the smallest normal code 0x08.
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 0x1p9f)));
  }
  // Normal: round the 23-bit mantissa to 3 bits, ties to even; a carry moves
  // into the exponent, and a <= 448 keeps the result representable.
  uint32_t bits = F32ToBits(a);
  bits += 0x7ffffu + ((bits >> 20) & 1u);
  return static_cast<uint8_t>(sign | ((bits >> 20) - (120u << 3)));
}

uint8_t E2M1FromF32(float x) {
  const uint32_t sign = (F32ToBits(x) >> 28) & 0x8u;
  const float a = std::fabs(x);
  if (std::isnan(a) || a >= kE2M1Max) return static_cast<uint8_t>(sign | 0x7u);
  if (a < 1.0f) {
    // 0, 0.5 and (rounding up) 1.0 = code 2: spacing 0.5.
    return static_cast<uint8_t>(sign | static_cast<uint32_t>(std::nearbyint(a * 2.0f)));
  }
  uint32_t bits = F32ToBits(a);
  bits += 0x1fffffu + ((bits >> 22) & 1u);
  return static_cast<uint8_t>(sign | ((bits >> 22) - (126u << 1)));
}

float Fp8BlockScale(float amax) {
  const float floor = BitsToF32(0x38d1b717u);    // fp32(1e-4)
  const float inv_max = BitsToF32(0x3b124925u);  // fp32(1/448)
  return CeilPow2FromBits(std::fmax(amax, floor) * inv_max);
}

float Fp4BlockScale(float amax) {
  const float floor = BitsToF32(0x01c00000u);    // 6·2^-126
  const float inv_max = BitsToF32(0x3e2aaaabu);  // fp32(1/6)
  return CeilPow2FromBits(std::fmax(amax, floor) * inv_max);
}

void ActQuantFp8(const bf16* x, int64_t rows, int64_t cols, int64_t block, uint8_t* codes,
                 float* scales) {
  DSV4_CHECK(block > 0 && cols % block == 0);
  const int64_t num_blocks = cols / block;
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < num_blocks; ++b) {
      const bf16* xb = x + r * cols + b * block;
      const float s = Fp8BlockScale(AbsMax(xb, block));
      uint8_t* qb = codes + r * cols + b * block;
      for (int64_t i = 0; i < block; ++i) {
        const float v = std::fmin(std::fmax(Bf16ToF32(xb[i]) / s, -kE4M3Max), kE4M3Max);
        qb[i] = E4M3FromF32(v);
      }
      scales[r * num_blocks + b] = s;
    }
  }
}

void KvQatFp8(bf16* x, int64_t rows, int64_t cols, int64_t nope) {
  constexpr int64_t kBlock = 64;
  DSV4_CHECK(nope >= 0 && nope <= cols && nope % kBlock == 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < nope; b += kBlock) {
      bf16* xb = x + r * cols + b;
      const float s = Fp8BlockScale(AbsMax(xb, kBlock));
      for (int64_t i = 0; i < kBlock; ++i) {
        const float v = std::fmin(std::fmax(Bf16ToF32(xb[i]) / s, -kE4M3Max), kE4M3Max);
        xb[i] = F32ToBf16(E4M3ToF32(E4M3FromF32(v)) * s);
      }
    }
  }
}

void Fp4Qat(bf16* x, int64_t rows, int64_t cols) {
  constexpr int64_t kBlock = 32;
  DSV4_CHECK(cols % kBlock == 0);
  for (int64_t r = 0; r < rows; ++r) {
    for (int64_t b = 0; b < cols; b += kBlock) {
      bf16* xb = x + r * cols + b;
      const float s = Fp4BlockScale(AbsMax(xb, kBlock));
      for (int64_t i = 0; i < kBlock; ++i) {
        const float v = std::fmin(std::fmax(Bf16ToF32(xb[i]) / s, -kE2M1Max), kE2M1Max);
        xb[i] = F32ToBf16(E2M1ToF32(E2M1FromF32(v)) * s);
      }
    }
  }
}

}  // namespace dsv4::kernels::ref
