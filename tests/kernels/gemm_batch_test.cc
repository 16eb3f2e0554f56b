// Tests of kernels/gemm.h, part 2: batch invariance (a row's result never
// depends on M or on the thread count, on every ISA and path), the batched
// block-scaled entry point, and the BF16-numerics GEMM variants (GemmBf16Fp8,
// GemmBf16F32Approx).  Goldens and differential tests: gemm_test.cc.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "gemm_test_util.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/quant.h"
#include "kernels/ref/gemm_ref.h"

namespace dsv4::kernels {
namespace {

using namespace ::dsv4::kernels::gemm_testing;  // NOLINT(build/namespaces)

// ---------------------------------------------------------------------------
// Batch invariance: on every ISA, row r of an M-row call is bitwise equal to
// the M = 1 call on that row alone, for 1, 2 and 3 threads.  N is large
// enough that the thread pool really splits the panels; M = 2..4 take the
// few-row path (a verify step's tail and drafts), M = 13 mixes row pairs and
// a single tail row, M = 65 crosses a 64-row tile and ends with a one-row
// tile (the GEMV code path inside a batch), M = 67 with a three-row tile.

template <typename T, typename Call>
void ExpectRowsInvariant(int64_t m, int64_t n, Call call, const std::string& what) {
  for (Isa isa : AllIsas()) {
    // The scalar reference is a plain per-element loop; one size suffices.
    if (isa == Isa::kScalar && m > 16) continue;
    IsaScope scope(isa);
    std::vector<T> single(m * n);
    for (int64_t r = 0; r < m; ++r) call(r, 1, single.data() + r * n, nullptr);
    for (int threads : {1, 2, 3}) {
      ThreadPool pool(threads);
      std::vector<T> batch(m * n);
      call(0, m, batch.data(), &pool);
      ASSERT_EQ(std::memcmp(batch.data(), single.data(), m * n * sizeof(T)), 0)
          << what << " " << IsaName(isa) << " threads " << threads;
    }
  }
}

// ExpectRowsInvariant of Fp8Gemm or Fp4Gemm (by the weight's type) on the
// activation codes [m, w.in] and their block scales.
template <typename Weight>
void ExpectBlockScaledRowsInvariant(const uint8_t* codes, const float* scales, int64_t m,
                                    const Weight& w, const std::string& what) {
  const int64_t k = w.in;
  ExpectRowsInvariant<bf16>(
      m, w.out,
      [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
        if constexpr (std::is_same_v<Weight, Fp8Weight>) {
          Fp8Gemm(codes + r0 * k, scales + r0 * (k / 128), rows, w, y, pool);
        } else {
          Fp4Gemm(codes + r0 * k, scales + r0 * (k / 128), rows, w, y, pool);
        }
      },
      what);
}

// BlockScaledGemmBatch is the separate Fp8Gemm / Fp4Gemm calls, bit for bit:
// mixed kinds, shared and distinct activations, M = 0, 1, 3 and 70 (two row
// blocks), every ISA and thread count.
TEST(GemmBatch, EqualsOneCallPerGemm) {
  std::mt19937 rng(41);
  constexpr int64_t k4 = 256, k8 = 384;
  struct Weights {
    Misaligned codes, scales;
  };
  std::vector<Fp4Weight> w4;
  std::vector<Fp8Weight> w8;
  std::vector<Weights> keep;
  for (int64_t n : {33, 200, 128}) {
    keep.push_back({RandomBytes(n * k4 / 2, &rng, 0, 255, false),
                    RandomBytes(n * k4 / 32, &rng, 118, 126, false)});
    w4.push_back({keep.back().codes.data(), keep.back().scales.data(), n, k4});
  }
  for (int64_t n : {17, 256}) {
    keep.push_back({RandomBytes(n * k8, &rng, 0, 255, true),
                    RandomBytes(((n + 127) / 128) * (k8 / 128), &rng, 116, 124, false)});
    w8.push_back({keep.back().codes.data(), keep.back().scales.data(), n, k8});
  }
  for (int64_t m : {0, 1, 3, 70}) {
    const QuantizedActivation a4 = RandomActivation(m, k4, &rng);
    const QuantizedActivation b4 = RandomActivation(m + 1, k4, &rng);
    const QuantizedActivation a8 = RandomActivation(m, k8, &rng);
    struct Entry {
      const QuantizedActivation* a;
      int64_t m;
      const Fp8Weight* fp8;
      const Fp4Weight* fp4;
    };
    // w4[0] and w4[1] share a4 (one decode); w8[0] and w8[1] share a8.
    const std::vector<Entry> entries = {{&a4, m, nullptr, &w4[0]}, {&a8, m, &w8[0], nullptr},
                                        {&a4, m, nullptr, &w4[1]}, {&b4, m + 1, nullptr, &w4[2]},
                                        {&a8, m, &w8[1], nullptr}, {&a4, m, nullptr, &w4[2]}};
    for (Isa isa : AllIsas()) {
      if (isa == Isa::kScalar && m > 3) continue;
      IsaScope scope(isa);
      std::vector<std::vector<bf16>> want, got;
      for (const Entry& e : entries) {
        const int64_t out = e.fp4 != nullptr ? e.fp4->out : e.fp8->out;
        want.emplace_back(e.m * out, bf16{0x1234});
        if (e.fp4 != nullptr) {
          Fp4Gemm(e.a->codes.data(), e.a->scales.data(), e.m, *e.fp4, want.back().data(), nullptr);
        } else {
          Fp8Gemm(e.a->codes.data(), e.a->scales.data(), e.m, *e.fp8, want.back().data(), nullptr);
        }
      }
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<BlockScaledGemm> batch;
        got.clear();
        for (const Entry& e : entries) {
          const int64_t out = e.fp4 != nullptr ? e.fp4->out : e.fp8->out;
          got.emplace_back(e.m * out, bf16{0x1234});
          batch.push_back(
              {e.a->codes.data(), e.a->scales.data(), e.m, e.fp8, e.fp4, got.back().data()});
        }
        BlockScaledGemmBatch(batch.data(), static_cast<int64_t>(batch.size()), &pool);
        for (size_t i = 0; i < entries.size(); ++i) {
          ASSERT_EQ(got[i].size(), want[i].size());
          // An m = 0 entry's empty vectors may hold a null data(), which memcmp must not see.
          EXPECT_TRUE(got[i].empty() ||
                      std::memcmp(got[i].data(), want[i].data(), got[i].size() * sizeof(bf16)) == 0)
              << IsaName(isa) << " m" << m << " entry " << i << " threads " << threads;
        }
      }
    }
  }
}

TEST(GemmBatchInvariance, AllKernels) {
  std::mt19937 rng(17);
  const int64_t n = 1100;
  // 6 rows: one register tile per block, so the FP8 dot kernel decodes the
  // next block's second panel after the tile instead of inside one.
  for (int64_t m : {2, 3, 4, 6, 13, 65, 67}) {
    const int64_t k = 512;
    const QuantizedActivation a = RandomActivation(m, k, &rng);
    Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
    Misaligned fp8_scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
    const Fp8Weight w8{codes.data(), fp8_scales.data(), n, k};
    ExpectBlockScaledRowsInvariant(a.codes.data(), a.scales.data(), m, w8,
                                   "Fp8Gemm m" + std::to_string(m));
    Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
    Misaligned fp4_scales = RandomBytes(n * k / 32, &rng, 118, 126, false);
    const Fp4Weight w4{packed.data(), fp4_scales.data(), n, k};
    ExpectBlockScaledRowsInvariant(a.codes.data(), a.scales.data(), m, w4,
                                   "Fp4Gemm m" + std::to_string(m));
    const int64_t kd = 300;
    const DenseWeights wd = RandomDense(n * kd, &rng);
    const std::vector<bf16> x = RandomBf16(m * kd, &rng);
    ExpectRowsInvariant<bf16>(
        m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          GemmBf16(x.data() + r0 * kd, kd, rows, kd, wd.Bf16(), n, y, n, pool);
        },
        "GemmBf16 m" + std::to_string(m));
    ExpectRowsInvariant<float>(
        m, n,
        [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
          GemmBf16F32(x.data() + r0 * kd, rows, kd, wd.Bf16(), n, y, pool);
        },
        "GemmBf16F32 m" + std::to_string(m));
    ExpectRowsInvariant<float>(
        m, n,
        [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
          GemmBf16xF32(x.data() + r0 * kd, rows, kd, wd.F32(), n, y, pool);
        },
        "GemmBf16xF32 m" + std::to_string(m));
  }
}

// The block-scaled GEMMs prepare their activation rows inside their tasks, a
// row block where a tile first needs it, threads sharing a block's rows: with
// more threads than row blocks and calls alternating between two activations
// on one pool (the per-call counters start afresh each call), every call
// equals the one-thread call on its own activation, bit for bit; so does a
// batch whose entries share an activation or have their own.
TEST(GemmBatchInvariance, RowsPreparedByTasksPerCall) {
  std::mt19937 rng(29);
  const int64_t m = 3 * cpu::kRowBlock + 5, n = 520, k = 384;
  const QuantizedActivation a[2] = {RandomActivation(m, k, &rng), RandomActivation(m, k, &rng)};
  Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
  Misaligned fp8_scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
  const Fp8Weight w8{codes.data(), fp8_scales.data(), n, k};
  Misaligned packed = RandomBytes(n * k / 2, &rng, 0, 255, false);
  Misaligned fp4_scales = RandomBytes(n * k / 32, &rng, 118, 126, false);
  const Fp4Weight w4{packed.data(), fp4_scales.data(), n, k};
  for (Isa isa : AllIsas()) {
    if (isa == Isa::kScalar) continue;  // the reference prepares no rows
    IsaScope scope(isa);
    std::vector<bf16> want8[2], want4[2];
    for (int i = 0; i < 2; ++i) {
      want8[i].resize(m * n);
      want4[i].resize(m * n);
      Fp8Gemm(a[i].codes.data(), a[i].scales.data(), m, w8, want8[i].data(), nullptr);
      Fp4Gemm(a[i].codes.data(), a[i].scales.data(), m, w4, want4[i].data(), nullptr);
    }
    ASSERT_NE(std::memcmp(want8[0].data(), want8[1].data(), m * n * sizeof(bf16)), 0);
    ThreadPool pool(5);
    std::vector<bf16> got(m * n);
    for (int call = 0; call < 6; ++call) {
      const int i = call % 2;
      Fp8Gemm(a[i].codes.data(), a[i].scales.data(), m, w8, got.data(), &pool);
      ASSERT_EQ(std::memcmp(got.data(), want8[i].data(), m * n * sizeof(bf16)), 0)
          << "Fp8Gemm " << IsaName(isa) << " call " << call;
      Fp4Gemm(a[i].codes.data(), a[i].scales.data(), m, w4, got.data(), &pool);
      ASSERT_EQ(std::memcmp(got.data(), want4[i].data(), m * n * sizeof(bf16)), 0)
          << "Fp4Gemm " << IsaName(isa) << " call " << call;
      // The batch: entries 0 and 2 share one activation, entry 1 has its own.
      std::vector<bf16> y0(m * n), y1(m * n), y2(m * n);
      const BlockScaledGemm batch[] = {
          {a[i].codes.data(), a[i].scales.data(), m, &w8, nullptr, y0.data()},
          {a[i].codes.data(), a[i].scales.data(), m, nullptr, &w4, y1.data()},
          {a[i].codes.data(), a[i].scales.data(), m, &w8, nullptr, y2.data()}};
      BlockScaledGemmBatch(batch, 3, &pool);
      ASSERT_EQ(std::memcmp(y0.data(), want8[i].data(), m * n * sizeof(bf16)), 0)
          << "batch entry 0 " << IsaName(isa) << " call " << call;
      ASSERT_EQ(std::memcmp(y1.data(), want4[i].data(), m * n * sizeof(bf16)), 0)
          << "batch entry 1 " << IsaName(isa) << " call " << call;
      ASSERT_EQ(std::memcmp(y2.data(), want8[i].data(), m * n * sizeof(bf16)), 0)
          << "batch entry 2 " << IsaName(isa) << " call " << call;
    }
  }
}

// Inputs whose dot products cancel: in every 128-block the products at j and
// j + 64 (j < 56) are exact negatives of each other and large (~10^5), the
// other 16 products tiny (~2^-11).  What survives is the rounding residue of
// the large partial sums, which depends on the summation order in nearly
// every output: any order difference between code paths shows up bitwise
// (random data would only flip a BF16 output once in ~10^4).
enum class Slot { kBig, kMirror, kTiny };
Slot SlotOf(int64_t k) {
  const int64_t j = k % 128;
  if (j < 56) return Slot::kBig;
  if (j >= 64 && j < 120) return Slot::kMirror;
  return Slot::kTiny;
}

struct CancellingFp8 {
  std::vector<uint8_t> x_codes, w_codes, w_scales, w_packed, w4_scales;
  std::vector<float> x_scales;
};

CancellingFp8 MakeCancelling(int64_t m, int64_t n, int64_t k, std::mt19937* rng) {
  std::uniform_int_distribution<int> big(0x60, 0x7e), tiny(0x01, 0x0f), nibble(4, 7);
  CancellingFp8 c;
  c.x_codes.resize(m * k);
  c.w_codes.resize(n * k);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t sign = static_cast<uint8_t>((*rng)() & 0x80);
      const Slot s = SlotOf(i);
      c.x_codes[r * k + i] = s == Slot::kMirror ? c.x_codes[r * k + i - 64]
                             : s == Slot::kBig  ? static_cast<uint8_t>(big(*rng) | sign)
                                                : static_cast<uint8_t>(0x08 | sign);
    }
  }
  std::vector<uint8_t> nibbles(n * k);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t i = 0; i < k; ++i) {
      const uint8_t sign = static_cast<uint8_t>((*rng)() & 0x80);
      const Slot s = SlotOf(i);
      c.w_codes[r * k + i] = s == Slot::kMirror ? c.w_codes[r * k + i - 64] ^ 0x80
                             : s == Slot::kBig  ? static_cast<uint8_t>(big(*rng) | sign)
                                                : static_cast<uint8_t>(tiny(*rng) | sign);
      nibbles[r * k + i] = s == Slot::kMirror ? nibbles[r * k + i - 64] ^ 0x8
                           : s == Slot::kBig  ? static_cast<uint8_t>(nibble(*rng) | (sign >> 4))
                                              : static_cast<uint8_t>(0x1 | (sign >> 4));
    }
  }
  c.x_scales.assign(m * k / 128, 1.0f);
  c.w_scales.assign(((n + 127) / 128) * (k / 128), 127);
  c.w4_scales.assign(n * k / 32, 127);
  c.w_packed.resize(n * k / 2);
  for (int64_t i = 0; i < n * k / 2; ++i) {
    c.w_packed[i] = static_cast<uint8_t>(nibbles[2 * i] | (nibbles[2 * i + 1] << 4));
  }
  return c;
}

// Sets the FP8 kernel choice for a scope (true: the FMA kernel everywhere).
struct ScopedFp8Fma {
  explicit ScopedFp8Fma(bool on) { cpu::UseFp8WithoutBf16DotForTesting(on); }
  ~ScopedFp8Fma() { cpu::UseFp8WithoutBf16DotForTesting(false); }
};

// The FP8 few-row paths stream K blocks in groups (4 for one row, 2 for 2..4
// rows) and the rest one by one: K = 33 blocks makes both, N = 131 a
// partial last panel; M = 3 compares one row with the few-row path, on
// random and on order-sensitive data.
TEST(GemmBatchInvariance, Fp8GemvLongRows) {
  std::mt19937 rng(37);
  const int64_t m = 3, n = 131, k = 33 * 128;
  const QuantizedActivation a = RandomActivation(m, k, &rng);
  Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
  Misaligned scales = RandomBytes(((n + 127) / 128) * (k / 128), &rng, 116, 124, false);
  const Fp8Weight w{codes.data(), scales.data(), n, k};
  ExpectBlockScaledRowsInvariant(a.codes.data(), a.scales.data(), m, w, "Fp8Gemm long rows");
  const CancellingFp8 c = MakeCancelling(m, n, k, &rng);
  const Fp8Weight wc{c.w_codes.data(), c.w_scales.data(), n, k};
  ExpectBlockScaledRowsInvariant(c.x_codes.data(), c.x_scales.data(), m, wc,
                                 "Fp8Gemm cancelling long rows");
  // Block sums that depend on the order the blocks are added in: +B, tiny,
  // -B (the exact mirror), tiny, ... (tiny < half an ulp of B), so the
  // result is the tiny blocks after the last cancellation only in K order.
  std::vector<uint8_t> xb(m * k), wb(n * k);
  for (int64_t i = 0; i < k; ++i) {
    const int64_t j = i / 128;
    const bool big = j % 2 == 0 && j + 1 < k / 128;
    for (int64_t r = 0; r < m; ++r) xb[r * k + i] = big ? 0x70 : 0x08;  // 128 or 2^-6
    for (int64_t col = 0; col < n; ++col) {
      const uint8_t sign = static_cast<uint8_t>((col * 7 + i) & 0x80);
      const uint8_t flip = j % 4 == 2 ? 0x80 : 0;
      wb[col * k + i] = big ? static_cast<uint8_t>(0x70 | (sign ^ flip)) : 0x08;
    }
  }
  const std::vector<float> sb(m * k / 128, 1.0f);
  const std::vector<uint8_t> wsb(((n + 127) / 128) * (k / 128), 127);
  const Fp8Weight wo{wb.data(), wsb.data(), n, k};
  ExpectBlockScaledRowsInvariant(xb.data(), sb.data(), m, wo,
                                 "Fp8Gemm block-order sensitive long rows");
}

// Activation scales folded into the BF16 dot kernel's values (gemm.cc, on
// CPUs with AVX512-BF16) give the bits of the unfolded ones: rows whose
// scales span the fold range, against weight scales from 2^-127 up, with
// outputs from subnormal to 2^100, equal bit for bit the same rows in a call
// that one more row's scale (not a power of two) keeps unfolded.  13 rows:
// register tiles and a one-row tail; 1..4 rows: the few-row walk.
TEST(GemmBatchInvariance, Fp8FoldedScalesEqualUnfolded) {
  std::mt19937 rng(59);
  const int64_t n = 200, k = 640;
  const int64_t num_kb = k / 128;
  Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
  // Columns 0..127: scales 2^-127 and 2^-126; 128..199: 2^-7 .. 2^0.
  const std::vector<uint8_t> w_scales = {0, 1, 0, 1, 0, 120, 127, 126, 127, 125};
  const Fp8Weight w{codes.data(), w_scales.data(), n, k};
  // Rows 0, 3, 6, ..: every block 2^-22; rows 1, 4, ..: 2^100; the rest mixed.
  const float kActScales[] = {cpu::kFp8FoldMinScale, 0x1p-10f, 1.0f,  0x1p20f,
                              cpu::kFp8FoldMaxScale, 0x1p-22f, 0x1p3f};
  const auto act_scale = [&](int64_t r, int64_t kb) {
    if (r % 3 == 0) return cpu::kFp8FoldMinScale;
    if (r % 3 == 1) return cpu::kFp8FoldMaxScale;
    return kActScales[(r * 3 + kb) % 7];
  };
  for (const int64_t m : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{13}}) {
    Misaligned x = RandomBytes((m + 1) * k, &rng, 0, 255, true);
    std::vector<float> x_scales((m + 1) * num_kb);
    for (int64_t i = 0; i < m * num_kb; ++i) x_scales[i] = act_scale(i / num_kb, i % num_kb);
    for (int64_t i = m * num_kb; i < (m + 1) * num_kb; ++i) x_scales[i] = 0.75f;
    ASSERT_TRUE(cpu::Fp8ScalesFold(x_scales.data(), m, w));
    ASSERT_FALSE(cpu::Fp8ScalesFold(x_scales.data(), m + 1, w));
    for (Isa isa : AllIsas()) {
      IsaScope scope(isa);
      for (int threads : {1, 2}) {
        ThreadPool pool(threads);
        std::vector<bf16> folded(m * n), unfolded((m + 1) * n);
        Fp8Gemm(x.data(), x_scales.data(), m, w, folded.data(), &pool);
        Fp8Gemm(x.data(), x_scales.data(), m + 1, w, unfolded.data(), &pool);
        ASSERT_EQ(std::memcmp(folded.data(), unfolded.data(), m * n * sizeof(bf16)), 0)
            << IsaName(isa) << " m " << m << " threads " << threads;
        if (m < 13 || !Fp8GemmUsesBf16Dots()) continue;
        // The ends of the range really occur.
        int tiny = 0, huge = 0;
        for (const bf16 v : folded) {
          const float f = std::fabs(Bf16ToF32(v));
          tiny += f > 0.0f && f < 0x1p-126f;
          huge += f > 0x1p90f;
        }
        EXPECT_GT(tiny, 0);
        EXPECT_GT(huge, 0);
      }
    }
  }
}

// Which activation scales fold (cpu::kFp8FoldMinScale): powers of two in
// [2^-22, 2^100] whose products with the weight's scales stay at or below
// 2^127 (a NaN weight scale, 255, is NaN either way).
TEST(GemmBatchInvariance, Fp8ScalesFoldRange) {
  std::vector<uint8_t> w_scales = {127, 127};  // one 128-row group, K 256
  const Fp8Weight w{nullptr, w_scales.data(), 100, 256};
  const auto folds = [&](float a, float b) {
    const float s[2] = {a, b};
    return cpu::Fp8ScalesFold(s, 1, w);
  };
  EXPECT_TRUE(folds(0x1p-22f, 0x1p100f));
  EXPECT_TRUE(folds(1.0f, 0x1p-5f));
  EXPECT_FALSE(folds(0x1p-23f, 1.0f));
  EXPECT_FALSE(folds(1.0f, 0x1p101f));
  EXPECT_FALSE(folds(0.75f, 1.0f));
  EXPECT_FALSE(folds(1.0f, std::nanf("")));
  EXPECT_FALSE(folds(-1.0f, 1.0f));
  EXPECT_FALSE(folds(1.0f, 0.0f));
  w_scales[1] = 254;  // 2^127: only with activation scales up to 1
  EXPECT_TRUE(folds(1.0f, 0x1p-3f));
  EXPECT_FALSE(folds(2.0f, 1.0f));
  w_scales[1] = 255;  // NaN
  EXPECT_TRUE(folds(0x1p100f, 1.0f));
  const float none = 1.0f;
  EXPECT_TRUE(cpu::Fp8ScalesFold(&none, 0, w));
}

TEST(GemmBatchInvariance, OrderSensitiveData) {
  std::mt19937 rng(23);
  const int64_t m = 13, n = 1100, k = 256;
  const CancellingFp8 c = MakeCancelling(m, n, k, &rng);
  // The data must really be order sensitive: the FMA kernel, which sums
  // each block in vector lanes, differs from the reference's sequential sum
  // in most outputs.  (The BF16 dot kernel's two chains over alternate K
  // pairs lose the tiny values just as the sequential sum does here.)
  std::vector<bf16> want(m * n), got(m * n);
  ref::Fp8Gemm(c.x_codes.data(), c.x_scales.data(), m,
               Fp8Weight{c.w_codes.data(), c.w_scales.data(), n, k}, want.data(), nullptr);
  if (BestSupportedIsa() != Isa::kScalar) {
    IsaScope scope(BestSupportedIsa());
    const ScopedFp8Fma fma(true);
    Fp8Gemm(c.x_codes.data(), c.x_scales.data(), m,
            Fp8Weight{c.w_codes.data(), c.w_scales.data(), n, k}, got.data(), nullptr);
    EXPECT_GT(CompareBf16(got.data(), want.data(), m * n).num_differ, m * n / 4);
  }
  const Fp8Weight w8{c.w_codes.data(), c.w_scales.data(), n, k};
  const Fp4Weight w4{c.w_packed.data(), c.w4_scales.data(), n, k};
  // The first 2..4 rows take the few-row path, all 13 the tiled one.
  for (const int64_t rows_m : {int64_t{2}, int64_t{3}, int64_t{4}, m}) {
    ExpectBlockScaledRowsInvariant(c.x_codes.data(), c.x_scales.data(), rows_m, w8,
                                   "Fp8Gemm cancelling m" + std::to_string(rows_m));
    ExpectBlockScaledRowsInvariant(c.x_codes.data(), c.x_scales.data(), rows_m, w4,
                                   "Fp4Gemm cancelling m" + std::to_string(rows_m));
  }
  // The same pattern in BF16 for the dense kernels.
  std::vector<bf16> x(m * k), wb(n * k);
  for (int64_t i = 0; i < m * k; ++i) x[i] = F32ToBf16(E4M3ToF32(c.x_codes[i]));
  for (int64_t i = 0; i < n * k; ++i) wb[i] = F32ToBf16(E4M3ToF32(c.w_codes[i]));
  // Row subsets: the one-row calls take the column-by-column GEMV.
  for (const int64_t rows_m : {int64_t{2}, int64_t{3}, int64_t{4}, m}) {
    ExpectRowsInvariant<bf16>(
        rows_m, n,
        [&](int64_t r0, int64_t rows, bf16* y, ThreadPool* pool) {
          GemmBf16(x.data() + r0 * k, k, rows, k, wb.data(), n, y, n, pool);
        },
        "GemmBf16 cancelling m" + std::to_string(rows_m));
  }
}

// Narrow outputs of long batches (the mHC mixes: N = 24) are split over row
// blocks instead of panels; the rows must still not notice.
TEST(GemmBatchInvariance, NarrowOutputSplitOverRows) {
  std::mt19937 rng(19);
  const int64_t m = 200, n = 24, k = 4096;
  const DenseWeights w = RandomDense(n * k, &rng);
  const std::vector<bf16> x = RandomBf16(m * k, &rng);
  ExpectRowsInvariant<float>(
      m, n,
      [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
        GemmBf16xF32(x.data() + r0 * k, rows, k, w.F32(), n, y, pool);
      },
      "GemmBf16xF32 narrow");
}

// ---------------------------------------------------------------------------
// GemmBf16Fp8 reads the FP8 weight in place.  With the FMA kernel (every CPU
// without AVX512-BF16 and VBMI) it must equal GemmBf16 on the dequantized
// BF16 copy bit for bit, on every ISA (scalar included), for any M, thread
// count, strides and misaligned codes; with the BF16 dot kernel it must stay
// within the summation-order bound of the exact result and be batch
// invariant.

TEST(GemmBf16Fp8, EqualsGemmBf16OnDequantizedWeightWithFmaKernel) {
  const ScopedFp8Fma fma(true);
  std::mt19937 rng(29);
  for (int64_t k : {128, 384}) {
    for (int64_t n : {1, 17, 130, 300}) {
      Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
      const int64_t ld_scale = k / 128;
      Misaligned scales = RandomBytes(((n + 127) / 128) * ld_scale, &rng, 112, 128, false);
      scales.data()[0] = 10;  // the exact range's ends
      if (n > 128) scales.data()[ld_scale] = 246;
      const Fp8Weight w{codes.data(), scales.data(), n, k};
      ASSERT_TRUE(Fp8IsExactBf16(w));
      std::vector<bf16> deq(n * k);
      for (int64_t c = 0; c < n; ++c) {
        for (int64_t i = 0; i < k; ++i) {
          const float v = E4M3ToF32(codes.data()[c * k + i]) *
                          E8M0ToF32(scales.data()[(c / 128) * ld_scale + i / 128]);
          deq[c * k + i] = F32ToBf16(v);
          ASSERT_EQ(Bf16ToF32(deq[c * k + i]), v);
        }
      }
      for (int64_t m : {1, 2, 13, 65}) {
        const int64_t ldx = k + 3, ldy = n + 2;
        const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
        for (Isa isa : AllIsas()) {
          if (isa == Isa::kScalar && m > 13) continue;
          IsaScope scope(isa);
          std::vector<bf16> want(m * ldy, bf16{0x1234});
          GemmBf16(x.data(), ldx, m, k, deq.data(), n, want.data(), ldy, nullptr);
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<bf16> got(m * ldy, bf16{0x1234});
            GemmBf16Fp8(x.data(), ldx, m, w, got.data(), ldy, &pool);
            ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0)
                << IsaName(isa) << " m" << m << " k" << k << " n" << n << " threads " << threads;
          }
        }
      }
    }
  }
}

// On a CPU with BF16 dot products and VBMI: the dot kernel's result is
// within the summation-order bound of the exact product of the BF16
// activations and the dequantized weight (plus the output's BF16 rounding),
// and row r of an M-row call equals the M = 1 call (one row, few rows, row
// pairs, tile tails), misaligned codes and strided rows included.
TEST(GemmBf16Fp8, DotKernelCloseToExactAndBatchInvariant) {
  if (!Fp8GemmUsesBf16Dots()) GTEST_SKIP() << "no BF16 dot products and VBMI on this CPU";
  std::mt19937 rng(37);
  for (int64_t k : {128, 384}) {
    for (int64_t n : {17, 300}) {
      Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
      const int64_t ld_scale = k / 128;
      Misaligned scales = RandomBytes(((n + 127) / 128) * ld_scale, &rng, 112, 128, false);
      const Fp8Weight w{codes.data(), scales.data(), n, k};
      const auto weight = [&](int64_t c, int64_t i) {
        return static_cast<double>(E4M3ToF32(codes.data()[c * k + i])) *
               E8M0ToF32(scales.data()[(c / 128) * ld_scale + i / 128]);
      };
      constexpr int64_t m = 67;
      const int64_t ldx = k + 3;
      const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
      ThreadPool pool(2);
      std::vector<bf16> got(m * n);
      GemmBf16Fp8(x.data(), ldx, m, w, got.data(), n, &pool);
      const double gamma = 2.0 * static_cast<double>(k) * std::ldexp(1.0, -24);
      for (int64_t r = 0; r < m; ++r) {
        for (int64_t c = 0; c < n; ++c) {
          double exact = 0.0, abs_sum = 0.0;
          for (int64_t i = 0; i < k; ++i) {
            const double p = Bf16ToF32(x[r * ldx + i]) * weight(c, i);
            exact += p;
            abs_sum += std::fabs(p);
          }
          const double bound = gamma * abs_sum + std::ldexp(std::fabs(exact) + gamma * abs_sum, -8);
          ASSERT_LE(std::fabs(Bf16ToF32(got[r * n + c]) - exact), bound)
              << "k" << k << " n" << n << " row " << r << " column " << c;
        }
      }
      for (int64_t rows : {int64_t{2}, int64_t{3}, int64_t{4}, int64_t{13}, m}) {
        ExpectRowsInvariant<bf16>(
            rows, n,
            [&](int64_t r0, int64_t count, bf16* y, ThreadPool* p) {
              GemmBf16Fp8(x.data() + r0 * ldx, ldx, count, w, y, n, p);
            },
            "GemmBf16Fp8 dot k" + std::to_string(k) + " n" + std::to_string(n));
      }
    }
  }
}

// The grouped entry point (wo_a in one dispatch) is the per-group calls,
// bit for bit, whichever FP8 kernel, ISA, M, thread count, strides and group
// count (tiles straddle group boundaries when a thread's chunk does).
TEST(GemmBf16Fp8, GroupedEqualsOneCallPerGroup) {
  std::mt19937 rng(31);
  for (bool fma_kernel : {false, true}) {
    const ScopedFp8Fma fma(fma_kernel);
    for (int64_t groups : {1, 3}) {
      for (int64_t k : {128, 384}) {
        const int64_t rows = 128 * (groups == 1 ? 2 : 1), n = groups * rows;
        Misaligned codes = RandomBytes(n * k, &rng, 0, 255, true);
        Misaligned scales = RandomBytes((n / 128) * (k / 128), &rng, 112, 128, false);
        const Fp8Weight w{codes.data(), scales.data(), n, k};
        ASSERT_TRUE(Fp8IsExactBf16(w));
        for (int64_t m : {1, 2, 13, 70}) {
          const int64_t ldx = groups * k + 5, ldy = n + 3;
          const std::vector<bf16> x = RandomBf16(m * ldx, &rng);
          for (Isa isa : AllIsas()) {
            if (isa == Isa::kScalar && m > 13) continue;
            IsaScope scope(isa);
            std::vector<bf16> want(m * ldy, bf16{0x1234});
            for (int64_t g = 0; g < groups; ++g) {
              const Fp8Weight part{codes.data() + g * rows * k,
                                   scales.data() + g * (rows / 128) * (k / 128), rows, k};
              GemmBf16Fp8(x.data() + g * k, ldx, m, part, want.data() + g * rows, ldy, nullptr);
            }
            for (int threads : {1, 2, 3}) {
              ThreadPool pool(threads);
              std::vector<bf16> got(m * ldy, bf16{0x1234});
              GemmBf16Fp8Grouped(x.data(), ldx, m, groups, w, got.data(), ldy, &pool);
              ASSERT_EQ(std::memcmp(got.data(), want.data(), got.size() * sizeof(bf16)), 0)
                  << IsaName(isa) << (fma_kernel ? " fma" : "") << " groups " << groups << " m" << m
                  << " k" << k << " threads " << threads;
            }
          }
        }
      }
    }
  }
}

TEST(GemmBf16Fp8, ExactnessCheck) {
  std::vector<uint8_t> codes(256 * 128, 0x38), scales(2, 120);
  const Fp8Weight w{codes.data(), scales.data(), 256, 128};
  EXPECT_TRUE(Fp8IsExactBf16(w));
  for (uint8_t bad_scale : {0, 9, 247, 255}) {
    scales[1] = bad_scale;
    EXPECT_FALSE(Fp8IsExactBf16(w)) << int{bad_scale};
  }
  scales[1] = 246;
  EXPECT_TRUE(Fp8IsExactBf16(w));
  for (uint8_t nan_code : {0x7f, 0xff}) {
    codes[200 * 128 + 5] = nan_code;
    EXPECT_FALSE(Fp8IsExactBf16(w)) << int{nan_code};
  }
}

// GemmBf16F32Pair (a compressor's two projections in one dispatch) is the
// two GemmBf16F32 calls, bit for bit: every ISA, M (one row, few rows, row
// blocks), panel tails on either weight, K tails, 1-3 threads.
TEST(GemmBf16F32Pair, EqualsTwoCalls) {
  std::mt19937 rng(43);
  for (int64_t k : {256, 300}) {
    for (auto [n0, n1] : {std::pair<int64_t, int64_t>{64, 64}, {37, 130}, {300, 17}}) {
      const DenseWeights w0 = RandomDense(n0 * k, &rng), w1 = RandomDense(n1 * k, &rng);
      for (int64_t m : {1, 3, 70}) {
        const std::vector<bf16> x = RandomBf16(m * k, &rng);
        for (Isa isa : AllIsas()) {
          if (isa == Isa::kScalar && m > 3) continue;
          IsaScope scope(isa);
          std::vector<float> want0(m * n0), want1(m * n1);
          GemmBf16F32(x.data(), m, k, w0.Bf16(), n0, want0.data(), nullptr);
          GemmBf16F32(x.data(), m, k, w1.Bf16(), n1, want1.data(), nullptr);
          for (int threads : {1, 2, 3}) {
            ThreadPool pool(threads);
            std::vector<float> got0(m * n0, -1.0f), got1(m * n1, -1.0f);
            GemmBf16F32Pair(x.data(), m, k, w0.Bf16(), n0, got0.data(), w1.Bf16(), n1, got1.data(),
                            &pool);
            const std::string what = std::string(IsaName(isa)) + " k" + std::to_string(k) + " n " +
                                     std::to_string(n0) + "/" + std::to_string(n1) + " m" +
                                     std::to_string(m) + " threads " + std::to_string(threads);
            ASSERT_EQ(std::memcmp(got0.data(), want0.data(), got0.size() * sizeof(float)), 0)
                << what;
            ASSERT_EQ(std::memcmp(got1.data(), want1.data(), got1.size() * sizeof(float)), 0)
                << what;
          }
        }
      }
    }
  }
}

// The approximate head kernel (MTP draft logits): within the summation-order
// bound of the exact FP32 result, batch and thread-count invariant, and
// GemmBf16F32 itself wherever the CPU or the ISA level lacks AVX512-BF16.
TEST(GemmBf16F32Approx, CloseToExactBatchInvariantExactWithoutBf16Dots) {
  std::mt19937 rng(29);
  const bool dots = BestSupportedIsa() == Isa::kAvx512 && CpuFeatures::Detect().avx512bf16;
  for (int64_t k : {256, 300, 64, 20}) {
    for (int64_t n : {1, 17, 1100}) {
      const DenseWeights w = RandomDense(n * k, &rng);
      for (int64_t m : {1, 2, 3, 4, 5, 9}) {
        const std::vector<bf16> x = RandomBf16(m * k, &rng);
        std::vector<double> abs_sum(m * n, 0.0);
        for (int64_t r = 0; r < m; ++r) {
          for (int64_t c = 0; c < n; ++c) {
            for (int64_t i = 0; i < k; ++i) {
              abs_sum[r * n + c] +=
                  std::fabs(static_cast<double>(Bf16ToF32(x[r * k + i])) * w.Bf16At(c * k + i));
            }
          }
        }
        const std::string what =
            "m" + std::to_string(m) + " n" + std::to_string(n) + " k" + std::to_string(k);
        std::vector<float> want(m * n), exact(m * n), got(m * n);
        ref::GemmBf16F32(x.data(), m, k, w.Bf16(), n, want.data(), nullptr);
        for (Isa isa : AllIsas()) {
          IsaScope scope(isa);
          GemmBf16F32(x.data(), m, k, w.Bf16(), n, exact.data(), nullptr);
          GemmBf16F32Approx(x.data(), m, k, w.Bf16(), n, got.data(), nullptr);
          if (isa == Isa::kAvx512 && dots) {
            ExpectF32WithinBound(got.data(), want.data(), abs_sum, k, "approx " + what);
          } else {
            ASSERT_EQ(std::memcmp(got.data(), exact.data(), got.size() * sizeof(float)), 0)
                << IsaName(isa) << " " << what;
          }
        }
        ExpectRowsInvariant<float>(
            m, n,
            [&](int64_t r0, int64_t rows, float* y, ThreadPool* pool) {
              GemmBf16F32Approx(x.data() + r0 * k, rows, k, w.Bf16(), n, y, pool);
            },
            "approx " + what);
      }
    }
  }
}

// The BF16 pair layout as gemm.h states it (column c's chunk i at
// ((c / 2) · 2·in/128 + 2i + c % 2) · 128, an odd last column paired with
// zeros), and unpacking restores the rows.
TEST(Bf16Pairs, LayoutAsDocumentedAndUnpackRestoresRows) {
  std::mt19937 rng(51);
  const int64_t out = 5, in = 256;
  const std::vector<bf16> rows = RandomBf16(out * in, &rng);
  ASSERT_TRUE(Bf16PairsFit(in));
  EXPECT_FALSE(Bf16PairsFit(300));
  ASSERT_EQ(Bf16PairsElements(out, in), 6 * in);
  std::vector<bf16> pairs(static_cast<size_t>(Bf16PairsElements(out, in)), bf16{0x7fff});
  PackBf16Pairs(rows.data(), out, in, pairs.data());
  for (int64_t c = 0; c < 6; ++c) {
    for (int64_t k = 0; k < in; ++k) {
      const int64_t at = ((c / 2) * 2 * (in / 128) + 2 * (k / 128) + c % 2) * 128 + k % 128;
      ASSERT_EQ(pairs[at].bits, c < out ? rows[c * in + k].bits : 0) << c << " " << k;
    }
  }
  std::vector<bf16> back(rows.size());
  UnpackBf16Rows(pairs.data(), out, in, back.data());
  EXPECT_EQ(std::memcmp(back.data(), rows.data(), rows.size() * sizeof(bf16)), 0);
}

// Every BF16 GEMM reads a weight in pairs bit for bit as in rows: GemmBf16,
// GemmBf16F32, GemmBf16F32Pair and GemmBf16F32Approx, every ISA (the scalar
// reference unpacks per call), the one-row and few-row walks and the tiles,
// odd and even column counts, 1 and 3 threads.
TEST(Bf16Pairs, EveryBf16GemmReadsPairsBitForBit) {
  std::mt19937 rng(52);
  for (int64_t k : {128, 512}) {
    for (int64_t n : {1, 17, 64, 131}) {
      const std::vector<bf16> w = RandomBf16(n * k, &rng);
      std::vector<bf16> wp(static_cast<size_t>(Bf16PairsElements(n, k)));
      PackBf16Pairs(w.data(), n, k, wp.data());
      for (int64_t m : {1, 2, 3, 4, 5, 9, 70}) {
        const std::vector<bf16> x = RandomBf16(m * k, &rng);
        for (Isa isa : AllIsas()) {
          if (isa == Isa::kScalar && m > 4) continue;
          IsaScope scope(isa);
          ThreadPool pool(3);
          for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
            const std::string what = std::string(IsaName(isa)) + " k" + std::to_string(k) + " n" +
                                     std::to_string(n) + " m" + std::to_string(m) +
                                     (p ? " 3 threads" : " 1 thread");
            std::vector<bf16> yr(m * n), yp(m * n);
            GemmBf16(x.data(), k, m, k, w.data(), n, yr.data(), n, p);
            GemmBf16(x.data(), k, m, k, wp.data(), n, yp.data(), n, p, Bf16Layout::kPairs);
            ASSERT_EQ(std::memcmp(yr.data(), yp.data(), yr.size() * sizeof(bf16)), 0)
                << "GemmBf16 " << what;
            std::vector<float> fr(m * n), fp(m * n, -1.0f), gr(m * n), gp(m * n, -1.0f);
            GemmBf16F32(x.data(), m, k, w.data(), n, fr.data(), p);
            GemmBf16F32(x.data(), m, k, wp.data(), n, fp.data(), p, Bf16Layout::kPairs);
            ASSERT_EQ(std::memcmp(fr.data(), fp.data(), fr.size() * sizeof(float)), 0)
                << "GemmBf16F32 " << what;
            std::fill(fp.begin(), fp.end(), -1.0f);
            GemmBf16F32Pair(x.data(), m, k, wp.data(), n, fp.data(), wp.data(), n, gp.data(), p,
                            Bf16Layout::kPairs);
            ASSERT_EQ(std::memcmp(fr.data(), fp.data(), fr.size() * sizeof(float)), 0)
                << "GemmBf16F32Pair " << what;
            ASSERT_EQ(std::memcmp(fr.data(), gp.data(), fr.size() * sizeof(float)), 0)
                << "GemmBf16F32Pair (second) " << what;
            GemmBf16F32Approx(x.data(), m, k, w.data(), n, gr.data(), p);
            std::fill(gp.begin(), gp.end(), -1.0f);
            GemmBf16F32Approx(x.data(), m, k, wp.data(), n, gp.data(), p, Bf16Layout::kPairs);
            ASSERT_EQ(std::memcmp(gr.data(), gp.data(), gr.size() * sizeof(float)), 0)
                << "GemmBf16F32Approx " << what;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
