// Helpers shared by the GEMM tests (gemm_test.cc: goldens and differential
// tests; gemm_batch_test.cc: batch invariance and the BF16 GEMM variants).
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/dispatch.h"
#include "kernels/quant.h"
#include "ops_test_util.h"
#include "tensor/numeric.h"

namespace dsv4::kernels::gemm_testing {

// The ISA sweep and guard shared with the other kernel tests.
using IsaScope = ::dsv4::testing::ScopedIsa;
inline std::vector<Isa> AllIsas() { return ::dsv4::testing::IsasToTest(); }

// BF16 ulp distance on the monotonic integer line (+0 == -0).
inline int64_t Bf16UlpDistance(bf16 a, bf16 b) {
  auto key = [](bf16 v) -> int64_t {
    const int64_t mag = v.bits & 0x7fff;
    return (v.bits & 0x8000) ? -mag : mag;
  };
  return std::llabs(key(a) - key(b));
}

struct UlpStats {
  int64_t num_differ = 0;
  int64_t max_ulp = 0;
};

inline UlpStats CompareBf16(const bf16* got, const bf16* want, int64_t n) {
  UlpStats s;
  for (int64_t i = 0; i < n; ++i) {
    const int64_t d = Bf16UlpDistance(got[i], want[i]);
    s.num_differ += d != 0;
    s.max_ulp = std::max(s.max_ulp, d);
  }
  return s;
}

// |got - want| <= 2·terms·2^-24·abs_sum per element (FP32 outputs: the
// summation-order bound of the exact dot product).
inline void ExpectF32WithinBound(const float* got, const float* want,
                                 const std::vector<double>& abs_sum, int64_t terms,
                                 const std::string& what) {
  const double gamma = 2.0 * static_cast<double>(terms) * std::ldexp(1.0, -24);
  for (size_t i = 0; i < abs_sum.size(); ++i) {
    ASSERT_LE(std::fabs(static_cast<double>(got[i]) - want[i]), gamma * abs_sum[i])
        << what << " element " << i << " got " << got[i] << " want " << want[i];
  }
}

// Random BF16 activations quantized by the (golden-tested) reference:
// rows ~N(0,1)·10^U(-2,2), every fifth row zero.
struct QuantizedActivation {
  std::vector<uint8_t> codes;  // [m, k]
  std::vector<float> scales;   // [m, k/128]
};

inline QuantizedActivation RandomActivation(int64_t m, int64_t k, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_real_distribution<float> decade(-2.0f, 2.0f);
  std::vector<bf16> x(m * k);
  for (int64_t r = 0; r < m; ++r) {
    const float scale = (r % 5 == 4) ? 0.0f : std::pow(10.0f, decade(*rng));
    for (int64_t i = 0; i < k; ++i) x[r * k + i] = F32ToBf16(normal(*rng) * scale);
  }
  QuantizedActivation a;
  a.codes.resize(m * k);
  a.scales.resize(m * k / 128);
  ActQuantFp8(x.data(), m, k, 128, a.codes.data(), a.scales.data());
  return a;
}

// |q·s| of every activation element, [m, k].
inline std::vector<double> AbsActivation(const QuantizedActivation& a, int64_t m, int64_t k) {
  std::vector<double> v(m * k);
  for (int64_t i = 0; i < m * k; ++i) v[i] = std::fabs(E4M3ToF32(a.codes[i]) * a.scales[i / 128]);
  return v;
}

// Random bytes at a deliberately odd address (safetensors offsets).
struct Misaligned {
  std::vector<uint8_t> storage;
  uint8_t* data() { return storage.data() + 1; }
};

inline Misaligned RandomBytes(int64_t n, std::mt19937* rng, uint8_t lo, uint8_t hi, bool no_nan) {
  std::uniform_int_distribution<int> byte(lo, hi);
  Misaligned b;
  b.storage.resize(n + 1);
  for (int64_t i = 0; i < n; ++i) {
    uint8_t v = static_cast<uint8_t>(byte(*rng));
    if (no_nan && (v & 0x7f) == 0x7f) v &= 0xfe;  // e4m3 NaN codes
    b.storage[i + 1] = v;
  }
  return b;
}

inline std::vector<bf16> RandomBf16(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> v(n);
  for (auto& e : v) e = F32ToBf16(normal(*rng));
  return v;
}

// Dense weights at misaligned addresses: BF16 at an odd byte, FP32 at 2 mod 4.
struct DenseWeights {
  std::vector<uint8_t> bf16_storage, f32_storage;
  const bf16* Bf16() const { return reinterpret_cast<const bf16*>(bf16_storage.data() + 1); }
  const float* F32() const { return reinterpret_cast<const float*>(f32_storage.data() + 2); }
  float F32At(int64_t i) const {
    float v;
    std::memcpy(&v, f32_storage.data() + 2 + 4 * i, 4);
    return v;
  }
  float Bf16At(int64_t i) const {
    uint16_t u;
    std::memcpy(&u, bf16_storage.data() + 1 + 2 * i, 2);
    return Bf16ToF32(bf16{u});
  }
};

inline DenseWeights RandomDense(int64_t n, std::mt19937* rng) {
  std::normal_distribution<float> normal(0.0f, 1.0f);
  DenseWeights d;
  d.bf16_storage.resize(2 * n + 1);
  d.f32_storage.resize(4 * n + 2);
  for (int64_t i = 0; i < n; ++i) {
    const float v = normal(*rng);
    const uint16_t u = F32ToBf16(v).bits;
    std::memcpy(d.bf16_storage.data() + 1 + 2 * i, &u, 2);
    std::memcpy(d.f32_storage.data() + 2 + 4 * i, &v, 4);
  }
  return d;
}

}  // namespace dsv4::kernels::gemm_testing
