// Bit-exactness pin of every kernels/gemm.h entry point on every ISA: fixed
// pseudo-random inputs (own generator, so the data never depends on the
// standard library's distributions), several M (1..5, 16, 17, 67: the GEMV,
// the few-row paths, row pairs, tile tails) and panel/K tails, hashed per
// (kernel, data, M, ISA) and compared with hashes recorded from the code as
// it was before the kernels were rewritten as one templated body per family.
// A refactor of the kernels must keep every hash; a deliberate numerics
// change re-records them (DSV4_GEMM_BITS_PRINT=1 prints the table).
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "gemm_bits_golden.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "ops_test_util.h"

namespace dsv4::kernels {
namespace {

using IsaScope = ::dsv4::testing::ScopedIsa;

constexpr int64_t kRows[] = {1, 2, 3, 4, 5, 16, 17, 67};
constexpr int64_t kMaxRows = 67;
constexpr int64_t kN = 203;  // panel tails: 203 = 12·16 + 11 = 25·8 + 3

// splitmix64: a fixed sequence on every platform.
struct Rng {
  uint64_t s;
  uint64_t Next() {
    uint64_t z = (s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  uint8_t Byte(int lo, int hi) { return static_cast<uint8_t>(lo + Next() % (hi - lo + 1)); }
  // e4m3 code without the NaN encodings (never produced by ActQuantFp8).
  uint8_t Fp8Code() {
    const uint8_t c = Byte(0, 255);
    return (c & 0x7f) == 0x7f ? c & 0xfe : c;
  }
  // Uniform(-1, 1)·2^[-4, 4]: a few decades, so sums cancel now and then.
  float Value() {
    const float u = static_cast<float>(Next() >> 40) * 0x1p-24f * 2.0f - 1.0f;
    return u * static_cast<float>(1 << Byte(0, 8)) * 0x1p-4f;
  }
  bf16 Bf16() { return F32ToBf16(Value()); }
};

uint64_t Fnv1a(const void* data, size_t bytes, uint64_t h = 0xcbf29ce484222325ull) {
  const auto* p = static_cast<const uint8_t*>(data);
  for (size_t i = 0; i < bytes; ++i) h = (h ^ p[i]) * 0x100000001b3ull;
  return h;
}

// One data set's inputs for all kernels (kMaxRows rows; a call uses a prefix).
struct Inputs {
  int64_t kq = 0, kd = 0;  // K of the block-scaled / dense kernels
  std::vector<uint8_t> x_codes, w8_codes, w8_scales, w4_packed, w4_scales;
  std::vector<float> x_scales, wf;
  std::vector<bf16> xd, wd;  // dense activation (row stride kd + 5) and weight
};

Inputs RandomInputs() {
  Rng rng{1};
  Inputs in;
  in.kq = 384;
  in.kd = 300;  // a 44-element K tail chunk
  for (int64_t i = 0; i < kMaxRows * in.kq; ++i) in.x_codes.push_back(rng.Fp8Code());
  for (int64_t i = 0; i < kMaxRows * in.kq / 128; ++i) {
    in.x_scales.push_back(0x1p-8f * static_cast<float>(1 + rng.Byte(0, 255)));
  }
  for (int64_t i = 0; i < kN * in.kq; ++i) in.w8_codes.push_back(rng.Fp8Code());
  for (int64_t i = 0; i < 2 * in.kq / 128; ++i) in.w8_scales.push_back(rng.Byte(116, 124));
  for (int64_t i = 0; i < kN * in.kq / 2; ++i) in.w4_packed.push_back(rng.Byte(0, 255));
  for (int64_t i = 0; i < kN * in.kq / 32; ++i) in.w4_scales.push_back(rng.Byte(118, 126));
  for (int64_t i = 0; i < kMaxRows * (in.kd + 5); ++i) in.xd.push_back(rng.Bf16());
  for (int64_t i = 0; i < kN * in.kd; ++i) in.wd.push_back(rng.Bf16());
  for (int64_t i = 0; i < kN * in.kd; ++i) in.wf.push_back(rng.Value());
  return in;
}

// Cancelling products (as GemmBatchInvariance.OrderSensitiveData): in each
// 128-block, products j and j + 64 (j < 56) are large exact negatives, the
// rest tiny, so any change of summation order changes most outputs.
// The activation's large codes span 15 octaves and the FP4 block scales vary
// (equal for the two halves of a mirror pair), so that partial sums are
// inexact and their rounding depends on the order.
uint8_t CancelCode(Rng* rng, int64_t j, const uint8_t* row, bool flip) {
  const uint8_t sign = static_cast<uint8_t>(rng->Next() & 0x80);
  if (j % 128 < 56) return static_cast<uint8_t>(rng->Byte(flip ? 0x60 : 0x08, 0x7e) | sign);
  if (j % 128 >= 64 && j % 128 < 120) return row[j - 64] ^ (flip ? 0x80 : 0);
  return static_cast<uint8_t>(rng->Byte(0x01, 0x0f) | sign);
}

Inputs CancellingInputs() {
  Rng rng{2};
  Inputs in;
  in.kq = in.kd = 256;
  in.x_codes.resize(kMaxRows * in.kq);
  for (int64_t r = 0; r < kMaxRows; ++r) {
    uint8_t* row = &in.x_codes[r * in.kq];
    for (int64_t j = 0; j < in.kq; ++j) row[j] = CancelCode(&rng, j, row, false);
  }
  in.x_scales.assign(kMaxRows * in.kq / 128, 1.0f);
  in.w8_codes.resize(kN * in.kq);
  for (int64_t c = 0; c < kN; ++c) {
    uint8_t* row = &in.w8_codes[c * in.kq];
    for (int64_t j = 0; j < in.kq; ++j) row[j] = CancelCode(&rng, j, row, true);
  }
  in.w8_scales.assign(2 * in.kq / 128, 127);
  // FP4: magnitudes 2..6 for the large slots, 0.5 for the tiny ones.
  std::vector<uint8_t> nib(kN * in.kq);
  for (int64_t i = 0; i < kN * in.kq; ++i) {
    const int64_t j = i % in.kq;
    const uint8_t sign = static_cast<uint8_t>((rng.Next() & 1) << 3);
    nib[i] = j % 128 < 56                       ? static_cast<uint8_t>(rng.Byte(4, 7) | sign)
             : (j % 128 >= 64 && j % 128 < 120) ? nib[i - 64] ^ 0x8
                                                : static_cast<uint8_t>(0x1 | sign);
  }
  for (int64_t i = 0; i < kN * in.kq / 2; ++i) {
    in.w4_packed.push_back(static_cast<uint8_t>(nib[2 * i] | (nib[2 * i + 1] << 4)));
  }
  for (int64_t i = 0; i < kN * in.kq / 32; ++i) {
    in.w4_scales.push_back(i % 4 < 2 ? rng.Byte(119, 127) : in.w4_scales[i - 2]);
  }
  in.xd.resize(kMaxRows * (in.kd + 5));
  for (int64_t r = 0; r < kMaxRows; ++r) {
    for (int64_t j = 0; j < in.kd + 5; ++j) {
      in.xd[r * (in.kd + 5) + j] =
          j < in.kd ? F32ToBf16(E4M3ToF32(in.x_codes[r * in.kq + j])) : bf16{0x7fc0};
    }
  }
  for (uint8_t c : in.w8_codes) in.wd.push_back(F32ToBf16(E4M3ToF32(c)));
  for (bf16 v : in.wd) in.wf.push_back(Bf16ToF32(v));
  return in;
}

// Rows [0, m) of x through `kernel`, hashed with the padding of y.
uint64_t RunKernel(const std::string& kernel, const Inputs& in, int64_t m) {
  const int64_t ldx = in.kd + 5, ldy = kN + 3;
  std::vector<bf16> yb(m * ldy, bf16{0x1234});
  std::vector<float> yf(m * kN, -7.0f);
  const Fp8Weight w8{in.w8_codes.data(), in.w8_scales.data(), kN, in.kq};
  const Fp4Weight w4{in.w4_packed.data(), in.w4_scales.data(), kN, in.kq};
  // The unstrided dense APIs take x rows of length kd: a compact copy.
  std::vector<bf16> xc(m * in.kd);
  for (int64_t r = 0; r < m; ++r) {
    std::memcpy(&xc[r * in.kd], &in.xd[r * ldx], in.kd * sizeof(bf16));
  }
  if (kernel == "Fp8Gemm" || kernel == "Fp8GemmFma") {
    // Fp8GemmFma: the FMA kernel even where the BF16 dot one would run.
    cpu::UseFp8WithoutBf16DotForTesting(kernel == "Fp8GemmFma");
    Fp8Gemm(in.x_codes.data(), in.x_scales.data(), m, w8, yb.data(), nullptr);
    cpu::UseFp8WithoutBf16DotForTesting(false);
    return Fnv1a(yb.data(), m * kN * sizeof(bf16));
  }
  if (kernel == "Fp4Gemm" || kernel == "Fp4GemmExact") {
    // Fp4GemmExact: the exact integer kernels even where the BF16 dot one
    // would run.
    cpu::UseFp4WithoutBf16DotForTesting(kernel == "Fp4GemmExact");
    Fp4Gemm(in.x_codes.data(), in.x_scales.data(), m, w4, yb.data(), nullptr);
    cpu::UseFp4WithoutBf16DotForTesting(false);
    return Fnv1a(yb.data(), m * kN * sizeof(bf16));
  }
  if (kernel == "GemmBf16") {
    GemmBf16(in.xd.data(), ldx, m, in.kd, in.wd.data(), kN, yb.data(), ldy, nullptr);
    return Fnv1a(yb.data(), yb.size() * sizeof(bf16));
  }
  if (kernel == "GemmBf16Fp8" || kernel == "GemmBf16Fp8Fma") {
    // K is the block-scaled one here (a multiple of 128): each row repeats
    // its dense row's first kd values; the 3 padding values are never read.
    std::vector<bf16> x(m * (in.kq + 3), bf16{0x7fc0});
    for (int64_t r = 0; r < m; ++r) {
      for (int64_t j = 0; j < in.kq; ++j) x[r * (in.kq + 3) + j] = in.xd[r * ldx + j % in.kd];
    }
    cpu::UseFp8WithoutBf16DotForTesting(kernel == "GemmBf16Fp8Fma");
    GemmBf16Fp8(x.data(), in.kq + 3, m, w8, yb.data(), ldy, nullptr);
    cpu::UseFp8WithoutBf16DotForTesting(false);
    return Fnv1a(yb.data(), yb.size() * sizeof(bf16));
  }
  if (kernel == "GemmBf16F32") {
    GemmBf16F32(xc.data(), m, in.kd, in.wd.data(), kN, yf.data(), nullptr);
  } else if (kernel == "GemmBf16F32Approx") {
    GemmBf16F32Approx(xc.data(), m, in.kd, in.wd.data(), kN, yf.data(), nullptr);
  } else if (kernel == "GemmBf16xF32") {
    GemmBf16xF32(xc.data(), m, in.kd, in.wf.data(), kN, yf.data(), nullptr);
  } else {
    ADD_FAILURE() << "unknown kernel " << kernel;
  }
  return Fnv1a(yf.data(), yf.size() * sizeof(float));
}

constexpr const char* kKernels[] = {
    "Fp8Gemm",     "Fp8GemmFma",     "Fp4Gemm",     "Fp4GemmExact",      "GemmBf16",
    "GemmBf16Fp8", "GemmBf16Fp8Fma", "GemmBf16F32", "GemmBf16F32Approx", "GemmBf16xF32"};

const testing::GemmBitsRow* Find(const std::string& kernel, const std::string& data, int64_t m) {
  for (const testing::GemmBitsRow& row : testing::kGemmBits) {
    if (kernel == row.kernel && data == row.data && m == row.m) return &row;
  }
  return nullptr;
}

TEST(GemmBits, EveryEntryPointKeepsItsRecordedBits) {
  const bool print = std::getenv("DSV4_GEMM_BITS_PRINT") != nullptr;
  // Below AVX512-BF16 the approximate head is GemmBf16F32 itself, and
  // without BF16 dots and VBMI the FP8 GEMM is the FMA kernel and the FP4
  // GEMM the exact one.
  const CpuFeatures cpu = CpuFeatures::Detect();
  const bool bf16_dots = cpu.avx512bf16;
  const bool fp8_dots = cpu.avx512bf16 && cpu.avx512vbmi;
  const std::vector<Isa> isas = ::dsv4::testing::IsasToTest();
  int64_t checked = 0;
  for (const char* data : {"random", "cancel"}) {
    const Inputs in = std::string(data) == "random" ? RandomInputs() : CancellingInputs();
    for (const char* kernel : kKernels) {
      for (int64_t m : kRows) {
        uint64_t got[3] = {0, 0, 0};
        for (Isa isa : isas) {
          IsaScope scope(isa);
          got[static_cast<int>(isa)] = RunKernel(kernel, in, m);
        }
        if (print) {
          std::printf(
              "    {\"%s\", \"%s\", %lld, {0x%016llxull, 0x%016llxull, 0x%016llxull}},\n", kernel,
              data, static_cast<long long>(m), static_cast<unsigned long long>(got[0]),
              static_cast<unsigned long long>(got[1]), static_cast<unsigned long long>(got[2]));
          continue;
        }
        const testing::GemmBitsRow* row = Find(kernel, data, m);
        ASSERT_NE(row, nullptr) << kernel << " " << data << " m" << m;
        const std::string approx = kernel;
        for (Isa isa : isas) {
          uint64_t want = row->hash[static_cast<int>(isa)];
          if (approx == "GemmBf16F32Approx" && isa == Isa::kAvx512 && !bf16_dots) {
            want = Find("GemmBf16F32", data, m)->hash[2];
          }
          if ((approx == "Fp8Gemm" || approx == "GemmBf16Fp8") && isa == Isa::kAvx512 &&
              !fp8_dots) {
            want = Find(approx + "Fma", data, m)->hash[2];
          }
          if (approx == "Fp4Gemm" && isa == Isa::kAvx512 && !fp8_dots) {
            want = Find("Fp4GemmExact", data, m)->hash[2];
          }
          EXPECT_EQ(got[static_cast<int>(isa)], want)
              << kernel << " " << data << " m" << m << " " << IsaName(isa);
          ++checked;
        }
      }
    }
  }
  if (!print) {
    EXPECT_GE(checked, 2 * 10 * 8 * 2);
  }
}

}  // namespace
}  // namespace dsv4::kernels
