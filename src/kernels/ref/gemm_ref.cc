#include "kernels/ref/gemm_ref.h"

#include <array>
#include <cstring>
#include <limits>

#include "base/logging.h"

namespace dsv4::kernels::ref {

namespace {

// Element loads through memcpy: weights come straight from safetensors
// offsets and may be misaligned for their type.
float LoadBf16(const bf16* p, int64_t i) {
  uint16_t u;
  std::memcpy(&u, reinterpret_cast<const uint8_t*>(p) + 2 * i, 2);
  return Bf16ToF32(bf16{u});
}
float LoadF32(const float* p, int64_t i) {
  float v;
  std::memcpy(&v, reinterpret_cast<const uint8_t*>(p) + 4 * i, 4);
  return v;
}
void StoreBf16(bf16* p, int64_t i, float v) {
  const uint16_t u = F32ToBf16(v).bits;
  std::memcpy(reinterpret_cast<uint8_t*>(p) + 2 * i, &u, 2);
}
void StoreF32(float* p, int64_t i, float v) {
  std::memcpy(reinterpret_cast<uint8_t*>(p) + 4 * i, &v, 4);
}

// Exact decode tables (E4M3ToF32 uses ldexp; the GEMM loops want a lookup).
struct Tables {
  std::array<float, 256> e4m3;
  std::array<float, 16> e2m1;
  Tables() {
    for (int c = 0; c < 256; ++c) e4m3[c] = E4M3ToF32(static_cast<uint8_t>(c));
    for (int c = 0; c < 16; ++c) e2m1[c] = E2M1ToF32(static_cast<uint8_t>(c));
  }
};

}  // namespace

void Fp8Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp8Weight& w, bf16* y,
             ThreadPool* /*pool*/) {
  DSV4_CHECK(w.in % 128 == 0);
  const Tables t;
  const int64_t num_kb = w.in / 128;
  const int64_t ld_scale = (w.in + 127) / 128;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t n = 0; n < w.out; ++n) {
      float acc = 0.0f;
      for (int64_t kb = 0; kb < num_kb; ++kb) {
        const uint8_t* xq = x_codes + r * w.in + kb * 128;
        const uint8_t* wq = w.codes + n * w.in + kb * 128;
        float part = 0.0f;
        // Products of two e4m3 values are exact in FP32.
        for (int64_t k = 0; k < 128; ++k) part += t.e4m3[xq[k]] * t.e4m3[wq[k]];
        const float sw = E8M0ToF32(w.scales[(n / 128) * ld_scale + kb]);
        acc += part * (LoadF32(x_scales, r * num_kb + kb) * sw);
      }
      StoreBf16(y, r * w.out + n, acc);
    }
  }
}

// Each 32-block's sum of products is the exact sum rounded once to FP32
// (docs/kernels.md "FP4: exact 32-block sums"): the products are integers in
// units of 2^-10 (e4m3 = a·2^-9, e2m1 = u·2^-1 with a, u integers), so the
// sum is taken in int64 and converted once.  A NaN code makes it NaN.
void Fp4Gemm(const uint8_t* x_codes, const float* x_scales, int64_t m, const Fp4Weight& w, bf16* y,
             ThreadPool* /*pool*/) {
  DSV4_CHECK(w.in % 128 == 0);
  const Tables t;
  const int64_t num_j = w.in / 32;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t n = 0; n < w.out; ++n) {
      float acc = 0.0f;
      for (int64_t j = 0; j < num_j; ++j) {
        const uint8_t* xq = x_codes + r * w.in + j * 32;
        const std::array<uint8_t, 16> wp = Fp4CodesOf(w, n, j);
        int64_t sum = 0;  // in units of 2^-10
        bool nan = false;
        for (int64_t k = 0; k < 32; ++k) {
          const uint8_t code = (k & 1) ? (wp[k / 2] >> 4) : (wp[k / 2] & 0xf);
          const float a = t.e4m3[xq[k]];
          nan = nan || a != a;
          if (!nan) {
            sum += static_cast<int64_t>(a * 512.0f) * static_cast<int64_t>(t.e2m1[code] * 2.0f);
          }
        }
        const float part =
            nan ? std::numeric_limits<float>::quiet_NaN() : static_cast<float>(sum) * 0x1p-10f;
        const float sa = LoadF32(x_scales, r * (w.in / 128) + j / 4);
        acc += (part * sa) * E8M0ToF32(Fp4ScaleOf(w, n, j));
      }
      StoreBf16(y, r * w.out + n, acc);
    }
  }
}

void GemmBf16(const bf16* x, int64_t ldx, int64_t m, int64_t k, const bf16* w, int64_t n, bf16* y,
              int64_t ldy, ThreadPool* /*pool*/) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += LoadBf16(x, r * ldx + i) * LoadBf16(w, c * k + i);
      StoreBf16(y, r * ldy + c, acc);
    }
  }
}

// GemmBf16's loop with the weight dequantized on the fly: code·scale is one
// FP32 rounding of an exact value (REQUIRES of gemm.h), i.e. the BF16 weight.
void GemmBf16Fp8(const bf16* x, int64_t ldx, int64_t m, const Fp8Weight& w, bf16* y, int64_t ldy,
                 ThreadPool* /*pool*/) {
  const int64_t ld_scale = (w.in + 127) / 128;
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < w.out; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < w.in; ++i) {
        const float wv =
            E4M3ToF32(w.codes[c * w.in + i]) * E8M0ToF32(w.scales[(c / 128) * ld_scale + i / 128]);
        acc += LoadBf16(x, r * ldx + i) * wv;
      }
      StoreBf16(y, r * ldy + c, acc);
    }
  }
}

void GemmBf16F32(const bf16* x, int64_t m, int64_t k, const bf16* w, int64_t n, float* y,
                 ThreadPool* /*pool*/) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += LoadBf16(x, r * k + i) * LoadBf16(w, c * k + i);
      StoreF32(y, r * n + c, acc);
    }
  }
}

void GemmBf16xF32(const bf16* x, int64_t m, int64_t k, const float* w, int64_t n, float* y,
                  ThreadPool* /*pool*/) {
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      float acc = 0.0f;
      for (int64_t i = 0; i < k; ++i) acc += LoadBf16(x, r * k + i) * LoadF32(w, c * k + i);
      StoreF32(y, r * n + c, acc);
    }
  }
}

}  // namespace dsv4::kernels::ref
