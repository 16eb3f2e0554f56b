// Scalar number formats of DeepSeek-V4 checkpoints (docs/model.md "Number formats").
// Decoding is exact; BF16 encoding rounds to nearest, ties to even.  The
// quantizing encoders (FP8/FP4 with round-to-nearest-even and saturation)
// live in kernels/quant.h because they are part of the numerics contract.
#pragma once

#include <cstdint>
#include <cstring>

namespace dsv4 {

// bfloat16 storage.  Arithmetic is never done in bf16: upcast, compute in
// FP32, round once (docs/model.md "Rounding points").
struct bf16 {
  uint16_t bits = 0;
};
static_assert(sizeof(bf16) == 2);

inline float Bf16ToF32(bf16 v) {
  uint32_t u = static_cast<uint32_t>(v.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

// Round to nearest even; NaN stays a (quiet) NaN.
inline bf16 F32ToBf16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if ((u & 0x7fffffffu) > 0x7f800000u) return bf16{static_cast<uint16_t>((u >> 16) | 0x40)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return bf16{static_cast<uint16_t>(u >> 16)};
}

// FP32 value rounded through BF16.
inline float RoundBf16(float f) { return Bf16ToF32(F32ToBf16(f)); }

inline float BitsToF32(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline uint32_t F32ToBits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

// IEEE half precision (the F16 checkpoint dtype).
float F16ToF32(uint16_t h);

// float8_e8m0fnu: 2^(byte-127); byte 0 is 2^-127 (an FP32 subnormal), 255 NaN.
float E8M0ToF32(uint8_t byte);

// float8_e4m3fn -> FP32, exact.  0x7F/0xFF are NaN; 0x80 is -0.
float E4M3ToF32(uint8_t code);

// e2m1 code (low 4 bits) -> FP32, exact: 0, .5, 1, 1.5, 2, 3, 4, 6 and negatives.
float E2M1ToF32(uint8_t code);

}  // namespace dsv4
