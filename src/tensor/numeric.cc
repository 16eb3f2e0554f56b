#include "tensor/numeric.h"

#include <cmath>
#include <limits>

namespace dsv4 {

float F16ToF32(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1f;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0) {
    float v = std::ldexp(static_cast<float>(mant), -24);
    return sign ? -v : v;
  }
  if (exp == 31) return BitsToF32(sign | 0x7f800000u | (mant << 13));
  return BitsToF32(sign | ((exp + 112) << 23) | (mant << 13));
}

float E8M0ToF32(uint8_t byte) {
  if (byte == 255) return std::numeric_limits<float>::quiet_NaN();
  if (byte == 0) return BitsToF32(0x00400000u);  // 2^-127, subnormal
  return BitsToF32(static_cast<uint32_t>(byte) << 23);
}

float E4M3ToF32(uint8_t code) {
  const bool neg = code & 0x80;
  const int exp = (code >> 3) & 0xf;
  const int mant = code & 7;
  float v;
  if (exp == 15 && mant == 7) {
    v = std::numeric_limits<float>::quiet_NaN();
  } else if (exp == 0) {
    v = std::ldexp(static_cast<float>(mant), -9);
  } else {
    v = std::ldexp(static_cast<float>(8 + mant), exp - 10);
  }
  return neg ? -v : v;
}

float E2M1ToF32(uint8_t code) {
  static constexpr float kMag[8] = {0.f, 0.5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f};
  const float v = kMag[code & 7];
  return (code & 8) ? -v : v;
}

}  // namespace dsv4
