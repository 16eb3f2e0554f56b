// Tests of kernels/int8_gemm.h: per-token quantization vectors (round half to
// even, amax floor, clamp), exact agreement of the AVX2 and AVX-512 VNNI GEMMs
// with the scalar reference over awkward sizes (K tails, column tails, rows
// that reach the INT32 extremes), batch and thread-count invariance.
#include "kernels/int8_gemm.h"

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/quant.h"
#include "kernels/ref/int8_gemm_ref.h"
#include "ops_test_util.h"
#include "tensor/tensor.h"

namespace dsv4::kernels {
namespace {

// The ISA sweep and guard shared with the other kernel tests.
using IsaScope = ::dsv4::testing::ScopedIsa;
std::vector<Isa> AllIsas() { return ::dsv4::testing::IsasToTest(); }

std::vector<bf16> Bf16s(const std::vector<float>& v) {
  std::vector<bf16> out;
  for (float f : v) out.push_back(F32ToBf16(f));
  return out;
}

TEST(ActQuantInt8PerToken, RoundsHalfToEvenAndClamps) {
  // Row 0: amax 2 -> scale 2/127; 1 -> 63.5 -> 64 (even), -2 -> -127.
  // Row 1: amax 0.5; 0.25 -> 63.5 -> 64.  Row 2: all zero -> scale 1e-4/127.
  const std::vector<bf16> x = Bf16s({0, 1, -2, 0.5f, -0.5f, 0.25f, 0, 0, 0});
  int8_t q[9];
  float s[3];
  ActQuantInt8PerToken(x.data(), 3, 3, q, s);
  EXPECT_EQ(s[0], 2.0f / 127.0f);
  EXPECT_EQ(s[1], 0.5f / 127.0f);
  EXPECT_EQ(s[2], 1e-4f / 127.0f);
  const int8_t want[9] = {0, 64, -127, 127, -127, 64, 0, 0, 0};
  for (int i = 0; i < 9; ++i) EXPECT_EQ(q[i], want[i]) << i;
}

TEST(ActQuantInt8PerToken, HalfwayCasesGoToEven) {
  // amax 127 -> scale exactly 1, so x/scale == x: 2.5 -> 2, 3.5 -> 4, -0.5 -> -0.
  const std::vector<bf16> x = Bf16s({127, 2.5f, 3.5f, -0.5f, -1.5f, 126.5f});
  int8_t q[6];
  float s;
  ActQuantInt8PerToken(x.data(), 1, 6, q, &s);
  EXPECT_EQ(s, 1.0f);
  const int8_t want[6] = {127, 2, 4, 0, -2, 126};
  for (int i = 0; i < 6; ++i) EXPECT_EQ(q[i], want[i]) << i;
}

// The SIMD quantizers (and the pool's row split) give the reference's codes
// and scales bit for bit: widths with and without a vector tail, rows of
// zeros, halfway quotients (amax 127 makes the scale exactly 1), a wide
// dynamic range, 1 and 3 threads.
TEST(ActQuantInt8PerToken, EveryIsaAndPoolMatchReference) {
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::uniform_int_distribution<int> exponent(-20, 20);
  ThreadPool pool(3);
  for (int64_t k : {1, 7, 16, 33, 128, 4096, 4100}) {
    const int64_t m = 9;
    std::vector<bf16> x(m * k);
    for (int64_t i = 0; i < m * k; ++i) {
      const int64_t r = i / k;
      float v = normal(rng);
      if (r == 1) v = 0.0f;                                                        // scale floor
      if (r == 2) v = static_cast<float>(static_cast<int>(i % 255) - 127) + 0.5f;  // halves
      if (r == 3) v = std::ldexp(normal(rng), exponent(rng));                      // wide range
      x[i] = F32ToBf16(v);
    }
    if (k > 1) x[2 * k] = F32ToBf16(127.0f);  // row 2: scale exactly 1
    std::vector<int8_t> want(m * k), got(m * k);
    std::vector<float> want_s(m), got_s(m);
    ref::ActQuantInt8PerToken(x.data(), m, k, want.data(), want_s.data());
    for (Isa isa : AllIsas()) {
      IsaScope scope(isa);
      for (ThreadPool* p : {static_cast<ThreadPool*>(nullptr), &pool}) {
        SCOPED_TRACE(::testing::Message() << IsaName(isa) << " k=" << k << (p ? " pool" : ""));
        std::fill(got.begin(), got.end(), int8_t{99});
        ActQuantInt8PerToken(x.data(), m, k, got.data(), got_s.data(), p);
        ASSERT_EQ(got, want);
        for (int64_t r = 0; r < m; ++r) ASSERT_EQ(got_s[r], want_s[r]) << "row " << r;
      }
    }
  }
}

struct Problem {
  std::vector<int8_t> x, w;
  std::vector<float> xs, ws;
  int64_t m, k, n;
};

Problem MakeProblem(int64_t m, int64_t k, int64_t n, uint32_t seed, bool extreme) {
  Problem p{{}, {}, {}, {}, m, k, n};
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> code(-127, 127);
  std::uniform_real_distribution<float> scale(1e-4f, 2e-2f);
  p.x.resize(static_cast<size_t>(m * k));
  p.w.resize(static_cast<size_t>(n * k));
  for (auto& v : p.x) v = static_cast<int8_t>(extreme ? ((rng() & 1) ? 127 : -127) : code(rng));
  // Weights may hold -128 (other compressed-tensors producers); activations never do.
  for (auto& v : p.w) v = static_cast<int8_t>(extreme ? ((rng() & 1) ? 127 : -128) : code(rng));
  if (extreme && m > 0 && n > 0) {
    // Row 0 x column 0 reaches +127*128 * k, row 0 x column 1 (if any) -127^2 * k.
    std::fill(p.x.begin(), p.x.begin() + k, int8_t{-127});
    std::fill(p.w.begin(), p.w.begin() + k, int8_t{-128});
    if (n > 1) std::fill(p.w.begin() + k, p.w.begin() + 2 * k, int8_t{127});
  }
  for (int64_t i = 0; i < m; ++i) p.xs.push_back(scale(rng));
  for (int64_t i = 0; i < n; ++i) p.ws.push_back(scale(rng));
  return p;
}

std::vector<bf16> RunGemm(const Problem& p, ThreadPool* pool) {
  std::vector<bf16> y(static_cast<size_t>(p.m * p.n));
  const Int8Weight w{p.w.data(), p.ws.data(), p.n, p.k};
  Int8Gemm(p.x.data(), p.xs.data(), p.m, w, y.data(), pool);
  return y;
}

// The weight in the panel layout the model packs at load on AVX-512 VNNI.
std::vector<bf16> RunGemmPanels(const Problem& p, ThreadPool* pool) {
  std::vector<bf16> y(static_cast<size_t>(p.m * p.n));
  const Int8Weight rows{p.w.data(), p.ws.data(), p.n, p.k};
  Buffer panels(static_cast<size_t>(Int8PanelBytes(p.n, p.k)));
  const Int8Weight w = PackInt8Panels(rows, panels.as<int8_t>());
  Int8Gemm(p.x.data(), p.xs.data(), p.m, w, y.data(), pool);
  return y;
}

std::vector<bf16> RunRef(const Problem& p) {
  std::vector<bf16> y(static_cast<size_t>(p.m * p.n));
  const Int8Weight w{p.w.data(), p.ws.data(), p.n, p.k};
  ref::Int8Gemm(p.x.data(), p.xs.data(), p.m, w, y.data(), nullptr);
  return y;
}

void ExpectSameBits(const std::vector<bf16>& a, const std::vector<bf16>& b, const char* what) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) ASSERT_EQ(a[i].bits, b[i].bits) << what << " at " << i;
}

// One GEMM case: M, K, N and whether the codes reach the INT32 extremes.
struct Size {
  int64_t m, k, n;
  bool extreme;
};

// Each size (seeds from `seed` on) through `run` under every ISA, on 1 and 3
// threads, bit for bit against the scalar reference.
void ExpectEveryIsaMatchesReference(const std::vector<Size>& sizes, uint32_t seed,
                                    std::vector<bf16> (*run)(const Problem&, ThreadPool*)) {
  ThreadPool pool(3);
  for (const Size& s : sizes) {
    const Problem p = MakeProblem(s.m, s.k, s.n, seed++, s.extreme);
    const std::vector<bf16> want = RunRef(p);
    for (Isa isa : AllIsas()) {
      IsaScope scope(isa);
      SCOPED_TRACE(::testing::Message() << IsaName(isa) << " m=" << s.m << " k=" << s.k
                                        << " n=" << s.n << " extreme=" << s.extreme);
      ExpectSameBits(run(p, nullptr), want, "1 thread");
      ExpectSameBits(run(p, &pool), want, "3 threads");
    }
  }
}

TEST(Int8Gemm, ReferenceIsTheDefiningFormula) {
  const Problem p = MakeProblem(3, 70, 5, 7, false);
  const std::vector<bf16> y = RunRef(p);
  for (int64_t r = 0; r < p.m; ++r) {
    for (int64_t c = 0; c < p.n; ++c) {
      int64_t acc = 0;
      for (int64_t i = 0; i < p.k; ++i) acc += p.x[r * p.k + i] * p.w[c * p.k + i];
      const float want = (static_cast<float>(acc) * p.xs[r]) * p.ws[c];
      EXPECT_EQ(y[r * p.n + c].bits, F32ToBf16(want).bits);
    }
  }
}

TEST(Int8Gemm, SimdPathsAreBitIdenticalToScalar) {
  const int64_t mkn[][3] = {{1, 64, 16},   {1, 4096, 37}, {5, 1, 3},   {2, 33, 9},
                            {7, 127, 18},  {1, 129, 4},   {3, 256, 5}, {65, 192, 21},
                            {1, 2048, 64}, {4, 95, 1},    {6, 200, 13}};
  for (bool extreme : {false, true}) {
    std::vector<Size> sizes;
    for (const auto& s : mkn) sizes.push_back({s[0], s[1], s[2], extreme});
    ExpectEveryIsaMatchesReference(sizes, extreme ? 12 : 1, RunGemm);
  }
}

// Row-layout weights on AVX-512 VNNI (packed per task, 6-row x 64-column
// micro-tiles) at prefill sizes against the scalar reference: ragged M
// (row-tile and row-block edges), N (16- and 64-column edges) and K
// (4-byte groups and 64-byte packing steps), INT32 extremes up to K = 65,536,
// 1 and 3 threads.  On other CPUs the same sizes check the AVX2 kernel.
TEST(Int8Gemm, PackedPrefillPathIsBitIdenticalToScalar) {
  ExpectEveryIsaMatchesReference({{512, 64, 64, false},
                                  {513, 1, 1, false},
                                  {517, 3, 17, false},
                                  {530, 65, 65, false},
                                  {600, 257, 80, false},
                                  {721, 36, 130, false},
                                  {512, 129, 48, true},
                                  {515, 1000, 19, true},
                                  {512, 65536, 3, true}},
                                 500, RunGemm);
}

// Row-layout weights at decode and verify sizes (2 <= M < 512; on AVX-512
// VNNI packed per task, each remainder tile of 1-5 rows) against the scalar
// reference: every M from 2 to 33, the row-block edges up to 511, column
// counts with partial 16- and 64-column blocks, K with every residue modulo
// 4 and a range of them modulo 64, INT32 extremes up to K = 65,536, 1 and 3
// threads.  (The
// sizes once chosen for the broadcast kernel these paths replaced.)
TEST(Int8Gemm, SmallBatchRowWeightsAreBitIdenticalToScalar) {
  std::vector<Size> sizes;
  const int64_t ks[] = {1, 5, 15, 16, 17, 102, 1024, 1040, 1100, 2051};
  const int64_t ns[] = {16, 17, 23, 29, 97, 200};
  for (int64_t m = 2; m <= 33; ++m) sizes.push_back({m, ks[m % 10], ns[m % 6], false});
  for (int64_t m : {48, 63, 64, 65, 255, 256, 257, 300, 511}) {
    sizes.push_back({m, ks[m % 10], ns[m % 6], false});
  }
  for (const Size s : {Size{2, 64, 16, true}, Size{17, 1000, 21, true}, Size{16, 65536, 16, true},
                       Size{5, 65536, 17, true}, Size{40, 4096, 100, false}}) {
    sizes.push_back(s);
  }
  ExpectEveryIsaMatchesReference(sizes, 700, RunGemm);
}

// The panel layout as int8_gemm.h states it: a column's 4 codes of input
// group q in lane c of vector j (column 16j + c of its 64-column block),
// zeros beyond K and N, then 128 x each column's sum; unpacking restores
// the rows.
TEST(Int8Panels, LayoutAsDocumentedAndUnpackRestoresRows) {
  const Problem p = MakeProblem(1, 70, 70, 3, true);  // 2 blocks, the second 6 columns
  const Int8Weight rows{p.w.data(), p.ws.data(), p.n, p.k};
  for (Isa isa : AllIsas()) {  // the portable packer and the VNNI one
    IsaScope scope(isa);
    SCOPED_TRACE(IsaName(isa));
    Buffer panels(static_cast<size_t>(Int8PanelBytes(p.n, p.k)));
    ASSERT_EQ(Int8PanelBlockBytes(70), 18 * 256 + 256);
    ASSERT_EQ(Int8PanelBytes(70, 70), 2 * Int8PanelBlockBytes(70));
    const Int8Weight w = PackInt8Panels(rows, panels.as<int8_t>());
    EXPECT_EQ(w.layout, Int8Layout::kPanels);
    EXPECT_EQ(w.scales, rows.scales);
    for (int64_t b = 0; b < 2; ++b) {
      const int8_t* block = w.codes + b * Int8PanelBlockBytes(p.k);
      for (int64_t c = 0; c < 64; ++c) {
        const int64_t n = 64 * b + c;
        int32_t sum = 0;
        for (int64_t k = 0; k < 72; ++k) {
          const int8_t want = n < p.n && k < p.k ? p.w[n * p.k + k] : 0;
          ASSERT_EQ(block[(k / 4) * 256 + (c / 16) * 64 + (c % 16) * 4 + k % 4], want)
              << "column " << n << " input " << k;
          sum += want;
        }
        int32_t stored;
        std::memcpy(&stored, block + 18 * 256 + 4 * c, 4);
        EXPECT_EQ(stored, 128 * sum) << "column " << n;
      }
    }
    std::vector<int8_t> back(p.w.size());
    const Int8Weight r = UnpackInt8Rows(w, back.data());
    EXPECT_EQ(r.layout, Int8Layout::kRows);
    EXPECT_EQ(back, p.w);
  }
}

// Weights packed at load (the panel layout) against the scalar reference:
// every row count up to two tiles and beyond (each remainder tile of 1-5
// rows), ragged K (4-byte groups) and N (16- and 64-column edges), INT32
// extremes up to K = 65,536, 1 and 3 threads.  On CPUs without VNNI the
// weight is unpacked per call and takes the row kernels.
TEST(Int8Gemm, PanelWeightsAreBitIdenticalToScalar) {
  std::vector<Size> sizes;
  const int64_t ks[] = {1, 3, 4, 65, 130, 257};
  const int64_t ns[] = {1, 16, 17, 63, 64, 65, 130};
  for (int64_t m = 1; m <= 14; ++m) sizes.push_back({m, ks[m % 6], ns[m % 7], false});
  for (const Size s : {Size{33, 100, 80, false}, Size{600, 36, 70, false}, Size{1, 4096, 37, true},
                       Size{7, 65536, 3, true}, Size{2, 1000, 64, true}}) {
    sizes.push_back(s);
  }
  ExpectEveryIsaMatchesReference(sizes, 900, RunGemmPanels);
}

// A row computed in a 600-row batch equals the same row computed alone and
// inside 4- and 21-row batches (other row tiles and task splits).
TEST(Int8Gemm, PackedRowsEqualFewRowPaths) {
  const Problem p = MakeProblem(600, 520, 70, 77, false);
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    const std::vector<bf16> full = RunGemm(p, nullptr);
    for (int64_t r0 : {int64_t{0}, int64_t{5}, int64_t{238}, int64_t{541}}) {
      for (int64_t rows : {int64_t{1}, int64_t{4}, int64_t{21}}) {
        Problem part = p;
        part.m = rows;
        part.x.assign(p.x.begin() + r0 * p.k, p.x.begin() + (r0 + rows) * p.k);
        part.xs.assign(p.xs.begin() + r0, p.xs.begin() + r0 + rows);
        const std::vector<bf16> y = RunGemm(part, nullptr);
        for (int64_t i = 0; i < rows * p.n; ++i) {
          ASSERT_EQ(y[i].bits, full[r0 * p.n + i].bits) << IsaName(isa) << " row " << r0 + i / p.n;
        }
      }
    }
  }
}

TEST(Int8Gemm, RowsDoNotDependOnBatch) {
  const Problem p = MakeProblem(70, 300, 40, 99, false);
  for (Isa isa : AllIsas()) {
    IsaScope scope(isa);
    const std::vector<bf16> full = RunGemm(p, nullptr);
    for (int64_t r : {int64_t{0}, int64_t{33}, int64_t{69}}) {
      Problem one = p;
      one.m = 1;
      one.x.assign(p.x.begin() + r * p.k, p.x.begin() + (r + 1) * p.k);
      one.xs = {p.xs[static_cast<size_t>(r)]};
      const std::vector<bf16> y = RunGemm(one, nullptr);
      for (int64_t c = 0; c < p.n; ++c) EXPECT_EQ(y[c].bits, full[r * p.n + c].bits);
    }
  }
}

TEST(Int8Gemm, QuantizedLinearApproximatesFloatProduct) {
  // End to end: per-token activation x per-channel weight stays within the
  // quantization error bound of the exact FP32 product.
  std::mt19937 rng(5);
  std::normal_distribution<float> nd(0, 1);
  const int64_t m = 4, k = 512, n = 24;
  std::vector<bf16> x(m * k);
  std::vector<float> xf(m * k), wf(n * k);
  for (int64_t i = 0; i < m * k; ++i) {
    x[i] = F32ToBf16(nd(rng));
    xf[i] = Bf16ToF32(x[i]);
  }
  std::vector<int8_t> wq(n * k), xq(m * k);
  std::vector<float> ws(n), xs(m);
  for (int64_t c = 0; c < n; ++c) {
    float amax = 0;
    for (int64_t i = 0; i < k; ++i) {
      wf[c * k + i] = nd(rng) * 0.05f;
      amax = std::max(amax, std::fabs(wf[c * k + i]));
    }
    ws[c] = amax / 127;
    for (int64_t i = 0; i < k; ++i) {
      wq[c * k + i] = static_cast<int8_t>(std::rint(wf[c * k + i] / ws[c]));
    }
  }
  ActQuantInt8PerToken(x.data(), m, k, xq.data(), xs.data());
  std::vector<bf16> y(m * n);
  Int8Gemm(xq.data(), xs.data(), m, Int8Weight{wq.data(), ws.data(), n, k}, y.data(), nullptr);
  for (int64_t r = 0; r < m; ++r) {
    for (int64_t c = 0; c < n; ++c) {
      double exact = 0, bound = 0;
      for (int64_t i = 0; i < k; ++i) {
        exact += double(xf[r * k + i]) * wf[c * k + i];
        bound += std::fabs(xf[r * k + i]) * ws[c] * 0.5 + std::fabs(wf[c * k + i]) * xs[r] * 0.5 +
                 xs[r] * ws[c] * 0.25;
      }
      const double got = Bf16ToF32(y[r * n + c]);
      EXPECT_LE(std::fabs(got - exact), bound + std::fabs(exact) * (1.0 / 128)) << r << "," << c;
    }
  }
}

// Manual benchmark (docs/performance.md): DRAM-bound GEMV (m = 1) and a small
// batch, INT8 (W8A8) next to FP8 (native), per ISA.  Four weight copies are
// rotated so each call streams its weight from memory.  Run with
//   kernel_int8_test --gtest_also_run_disabled_tests --gtest_filter=*Timing*
TEST(Int8Gemm, DISABLED_TimingAgainstFp8) {
  struct Shape2 {
    const char* name;
    int64_t out, in;
  };
  const Shape2 shapes[] = {{"wq_b 32768x1024", 32768, 1024},
                           {"wo_b 4096x8192", 4096, 8192},
                           {"expert w1 2048x4096", 2048, 4096}};
  constexpr int kCopies = 4;
  for (const Shape2& sh : shapes) {
    const size_t wbytes = static_cast<size_t>(sh.out * sh.in);
    std::vector<std::vector<int8_t>> w8(kCopies, std::vector<int8_t>(wbytes));
    std::vector<std::vector<uint8_t>> wf(kCopies, std::vector<uint8_t>(wbytes));
    std::mt19937 rng(3);
    for (int c = 0; c < kCopies; ++c) {
      for (size_t i = 0; i < wbytes; ++i) {
        w8[c][i] = static_cast<int8_t>(static_cast<int>(rng() % 255) - 127);
        wf[c][i] = static_cast<uint8_t>(rng() % 120);  // finite e4m3 codes
      }
    }
    std::vector<float> ws(sh.out, 0.01f);
    std::vector<uint8_t> fs(static_cast<size_t>(((sh.out + 127) / 128) * (sh.in / 128)), 120);
    for (int64_t m : {int64_t{1}, int64_t{16}}) {
      std::vector<bf16> x(static_cast<size_t>(m * sh.in));
      for (auto& v : x) v = F32ToBf16(static_cast<float>(rng() % 200) / 100.0f - 1.0f);
      std::vector<int8_t> xq(x.size());
      std::vector<float> xs(m);
      std::vector<uint8_t> xf(x.size());
      std::vector<float> xfs(static_cast<size_t>(m * sh.in / 128));
      std::vector<bf16> y(static_cast<size_t>(m * sh.out));
      for (Isa isa : AllIsas()) {
        if (isa == Isa::kScalar) continue;
        IsaScope scope(isa);
        auto time_ms = [&](const auto& fn) {
          for (int c = 0; c < kCopies; ++c) fn(c);  // warm-up
          const int reps = 8 * kCopies;
          const auto t0 = std::chrono::steady_clock::now();
          for (int r = 0; r < reps; ++r) fn(r % kCopies);
          return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0)
                     .count() /
                 reps;
        };
        const double t8 = time_ms([&](int c) {
          ActQuantInt8PerToken(x.data(), m, sh.in, xq.data(), xs.data());
          Int8Gemm(xq.data(), xs.data(), m, Int8Weight{w8[c].data(), ws.data(), sh.out, sh.in},
                   y.data(), nullptr);
        });
        const double tf = time_ms([&](int c) {
          ActQuantFp8(x.data(), m, sh.in, 128, xf.data(), xfs.data());
          Fp8Gemm(xf.data(), xfs.data(), m, Fp8Weight{wf[c].data(), fs.data(), sh.out, sh.in},
                  y.data(), nullptr);
        });
        std::printf("%-22s m=%-3lld %-7s INT8 %7.3f ms (%5.1f GB/s)   FP8 %7.3f ms (%5.1f GB/s)\n",
                    sh.name, static_cast<long long>(m), std::string(IsaName(isa)).c_str(), t8,
                    double(wbytes) / t8 / 1e6, tf, double(wbytes) / tf / 1e6);
      }
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels
