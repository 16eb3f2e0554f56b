// SIMD vs scalar-reference differential tests for the non-GEMM kernels (sizes
// 0..2x the vector width plus model sizes, misaligned pointers), with
// tolerances derived from the arithmetic, and batch-invariance tests: per
// token results must not depend on the tokens sharing a call or the threads.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <random>
#include <string>
#include <vector>

#include "base/cpu_features.h"
#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/indexer.h"
#include "kernels/mhc.h"
#include "kernels/norm.h"
#include "kernels/ref/attention_ref.h"
#include "kernels/ref/indexer_ref.h"
#include "kernels/ref/mhc_ref.h"
#include "kernels/ref/norm_ref.h"
#include "ops_test_util.h"

namespace dsv4::kernels {
namespace {

using testing::IsasToTest;
using testing::ScopedIsa;

constexpr double kU = 1.0 / (1 << 24);  // FP32 unit roundoff

std::vector<Isa> SimdIsas() {
  std::vector<Isa> out;
  for (Isa isa : IsasToTest()) {
    if (isa != Isa::kScalar) out.push_back(isa);
  }
  return out;
}

// The attention kernels to test: each ISA's, plus AVX-512's FMA kernel where
// the BF16 dot one is the default (cpu::ActiveAttendHeads).
struct AttnKernel {
  Isa isa;
  bool fma;
  std::string Name() const { return std::string(IsaName(isa)) + (fma ? " fma" : ""); }
};

std::vector<AttnKernel> AttnKernels(const std::vector<Isa>& isas) {
  std::vector<AttnKernel> out;
  for (Isa isa : isas) {
    out.push_back({isa, false});
    if (isa == Isa::kAvx512 && CpuFeatures::Detect().avx512bf16) out.push_back({isa, true});
  }
  return out;
}

// Selects one for a scope.
struct ScopedAttnKernel {
  explicit ScopedAttnKernel(const AttnKernel& k) : isa(k.isa) {
    cpu::UseAttentionWithoutBf16DotForTesting(k.fma);
  }
  ~ScopedAttnKernel() { cpu::UseAttentionWithoutBf16DotForTesting(false); }
  ScopedIsa isa;
};

// Buffers deliberately offset by one element from the allocation.
template <typename T>
struct Misaligned {
  explicit Misaligned(size_t n) : storage(n + 1) {}
  T* data() { return storage.data() + 1; }
  const T* data() const { return storage.data() + 1; }
  T& operator[](size_t i) { return storage[i + 1]; }
  size_t size() const { return storage.size() - 1; }
  std::vector<T> storage;
};

void FillBf16(bf16* p, size_t n, std::mt19937& rng, float scale) {
  std::normal_distribution<float> dist(0.0f, scale);
  for (size_t i = 0; i < n; ++i) p[i] = F32ToBf16(dist(rng));
}

double Bf16Ulp(double v) {
  const double a = std::fabs(v);
  if (a < 1e-38) return std::ldexp(1.0, -133);
  return std::ldexp(1.0, std::ilogb(a) - 7);
}

std::vector<int64_t> SizesUpTo(int64_t n, std::initializer_list<int64_t> extra) {
  std::vector<int64_t> out;
  for (int64_t i = 0; i <= n; ++i) out.push_back(i);
  out.insert(out.end(), extra);
  return out;
}

// The SIMD sum of squares only reorders an FP32 sum of n positive terms:
// relative error <= n*u per version, so inv (and y before rounding) moves by
// <= n*u relative; for n <= 8192 that is < 2^-10, below half a BF16 ulp, so
// the rounded outputs differ by at most one ulp.
TEST(OpsSimdTest, RmsNormMatchesReference) {
  std::mt19937 rng(1);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t dim : SizesUpTo(33, {64, 512, 4096, 4099})) {
      const int64_t rows = 3;
      Misaligned<bf16> x(rows * dim), w(dim), y(rows * dim), want(rows * dim);
      FillBf16(x.data(), rows * dim, rng, 3.0f);
      FillBf16(w.data(), dim, rng, 1.0f);
      RmsNorm(x.data(), rows, dim, w.data(), 1e-6f, y.data());
      ref::RmsNorm(x.data(), rows, dim, w.data(), 1e-6f, want.data());
      std::vector<bf16> got_v(y.data(), y.data() + rows * dim);
      std::vector<bf16> want_v(want.data(), want.data() + rows * dim);
      EXPECT_EQ(testing::CountUlpDiffs(got_v, want_v, 1), 0)
          << "dim " << dim << " " << IsaName(isa);
    }
  }
}

// Only the FP32 sum of the BF16 squares is reordered: ms moves by <= n*u
// relative, so bf16(ms) and then bf16(ms + eps) may land one BF16 ulp apart,
// r = bf16(rsqrt(ms)) then by at most one ulp, and y = bf16(q*r) by at most two.
TEST(OpsSimdTest, QHeadRmsMatchesReference) {
  std::mt19937 rng(7);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t dim : SizesUpTo(33, {128, 512, 515})) {
      const int64_t rows = 5;
      Misaligned<bf16> q(rows * dim);
      FillBf16(q.data(), rows * dim, rng, 0.7f);
      std::vector<bf16> got(q.data(), q.data() + rows * dim), want = got;
      bf16* got_p = q.data();  // run in place on the misaligned buffer
      QHeadRms(got_p, rows, dim, 1e-6f);
      ref::QHeadRms(want.data(), rows, dim, 1e-6f);
      got.assign(got_p, got_p + rows * dim);
      EXPECT_EQ(testing::CountUlpDiffs(got, want, 2), 0) << "dim " << dim << " " << IsaName(isa);
    }
  }
}

// Elementwise in the reference's order: bitwise equal.
// HcPost's columns split over a pool (chunks of 1,024: 2,500 ends in a
// partial chunk with a lane tail) give the same bits.
TEST(OpsSimdTest, HcWeightedSumAndPostEqualReference) {
  std::mt19937 rng(8);
  std::uniform_real_distribution<float> weight(0.0f, 2.0f);
  ThreadPool pool(2);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t dim : SizesUpTo(33, {2500, 4096})) {
      for (int64_t hc : {1, 4}) {
        const int64_t tokens = 3;
        Misaligned<bf16> x(tokens * hc * dim), f(tokens * dim);
        FillBf16(x.data(), x.size(), rng, 2.0f);
        FillBf16(f.data(), f.size(), rng, 2.0f);
        std::vector<float> pre(tokens * hc), comb(tokens * hc * hc);
        for (float& v : pre) v = weight(rng);
        for (float& v : comb) v = weight(rng);
        Misaligned<bf16> y(tokens * dim), y_post(tokens * hc * dim);
        std::vector<bf16> want(tokens * dim), want_post(tokens * hc * dim);
        HcWeightedSum(x.data(), tokens, hc, dim, pre.data(), y.data(), nullptr);
        ref::HcWeightedSum(x.data(), tokens, hc, dim, pre.data(), want.data());
        HcPost(f.data(), x.data(), tokens, hc, dim, pre.data(), comb.data(), y_post.data(),
               nullptr);
        ref::HcPost(f.data(), x.data(), tokens, hc, dim, pre.data(), comb.data(), want_post.data());
        EXPECT_EQ(
            testing::CountUlpDiffs(std::vector<bf16>(y.data(), y.data() + want.size()), want, 0), 0)
            << "weighted sum dim " << dim << " hc " << hc << " " << IsaName(isa);
        EXPECT_EQ(
            testing::CountUlpDiffs(
                std::vector<bf16>(y_post.data(), y_post.data() + want_post.size()), want_post, 0),
            0)
            << "post dim " << dim << " hc " << hc << " " << IsaName(isa);
        for (int64_t rows : {int64_t{1}, tokens}) {  // a decode token, a batch
          Misaligned<bf16> y_pool(rows * hc * dim);
          HcPost(f.data(), x.data(), rows, hc, dim, pre.data(), comb.data(), y_pool.data(), &pool);
          EXPECT_EQ(
              testing::CountUlpDiffs(
                  std::vector<bf16>(y_pool.data(), y_pool.data() + rows * hc * dim),
                  std::vector<bf16>(want_post.begin(), want_post.begin() + rows * hc * dim), 0),
              0)
              << "post over a pool, rows " << rows << " dim " << dim << " hc " << hc << " "
              << IsaName(isa);
        }
      }
    }
  }
}

// A prefill's tokens go over fn in column passes (64 tokens and more, in
// blocks of 32 with the accumulators carried between passes): every token's
// mixes stay bitwise what it gives alone, at widths with several passes and
// a tail, with leftover tokens after the last whole group, on 1-3 threads.
TEST(OpsSimdTest, HcMixesInColumnPassesEqualOneTokenCalls) {
  std::mt19937 rng(12);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t width : {64, 2048, 4096 + 16, 16387}) {
      const int64_t tokens = 70, n_mix = 5;
      Misaligned<bf16> x(tokens * width);
      Misaligned<float> fn(n_mix * width);
      FillBf16(x.data(), tokens * width, rng, 2.0f);
      for (int64_t i = 0; i < n_mix * width; ++i) fn[i] = dist(rng);
      std::vector<float> one(tokens * n_mix);
      for (int64_t t = 0; t < tokens; ++t) {
        HcMixes(x.data() + t * width, 1, width, fn.data(), n_mix, 1e-6f, one.data() + t * n_mix,
                nullptr);
      }
      for (int threads : {1, 2, 3}) {
        ThreadPool pool(threads);
        std::vector<float> got(tokens * n_mix);
        HcMixes(x.data(), tokens, width, fn.data(), n_mix, 1e-6f, got.data(), &pool);
        for (int64_t i = 0; i < tokens * n_mix; ++i) {
          ASSERT_EQ(F32ToBits(got[i]), F32ToBits(one[i]))
              << "width " << width << " token " << i / n_mix << " mix " << i % n_mix << " threads "
              << threads << " " << IsaName(isa);
        }
      }
    }
  }
}

// The per-token mHC steps split a prefill's tokens over the pool: the same
// bits as on the calling thread alone.
TEST(OpsSimdTest, HcSinkhornAndWeightedSumSplitOverThreads) {
  std::mt19937 rng(13);
  std::normal_distribution<float> dist(0.0f, 1.0f);
  const int64_t tokens = 70, hc = 4, dim = 320, n_mix = (2 + hc) * hc;
  std::vector<float> mixes(tokens * n_mix), scale(3), base(n_mix);
  for (float& v : mixes) v = dist(rng);
  for (float& v : scale) v = 0.5f + 0.1f * dist(rng);
  for (float& v : base) v = 0.1f * dist(rng);
  std::vector<bf16> x(tokens * hc * dim);
  FillBf16(x.data(), x.size(), rng, 1.0f);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    std::vector<float> pre(tokens * hc), post(tokens * hc), comb(tokens * hc * hc);
    HcSplitSinkhorn(mixes.data(), tokens, hc, scale.data(), base.data(), 20, 1e-6f, pre.data(),
                    post.data(), comb.data(), nullptr);
    std::vector<bf16> y(tokens * dim);
    HcWeightedSum(x.data(), tokens, hc, dim, pre.data(), y.data(), nullptr);
    for (int threads : {2, 3}) {
      ThreadPool pool(threads);
      std::vector<float> pre_t(pre.size()), post_t(post.size()), comb_t(comb.size());
      HcSplitSinkhorn(mixes.data(), tokens, hc, scale.data(), base.data(), 20, 1e-6f, pre_t.data(),
                      post_t.data(), comb_t.data(), &pool);
      std::vector<bf16> y_t(y.size());
      HcWeightedSum(x.data(), tokens, hc, dim, pre.data(), y_t.data(), &pool);
      EXPECT_EQ(std::memcmp(pre_t.data(), pre.data(), pre.size() * sizeof(float)), 0)
          << "pre " << threads << " " << IsaName(isa);
      EXPECT_EQ(std::memcmp(post_t.data(), post.data(), post.size() * sizeof(float)), 0)
          << "post " << threads << " " << IsaName(isa);
      EXPECT_EQ(std::memcmp(comb_t.data(), comb.data(), comb.size() * sizeof(float)), 0)
          << "comb " << threads << " " << IsaName(isa);
      EXPECT_EQ(testing::CountUlpDiffs(y_t, y, 0), 0) << threads << " " << IsaName(isa);
    }
  }
}

// mix = dot * inv.  Reordered FP32 dot: |error| <= n*u*sum|v f| per version;
// inv relative error <= (n/2 + 4)*u per version.
TEST(OpsSimdTest, HcMixesMatchesReference) {
  std::mt19937 rng(2);
  std::normal_distribution<float> dist(0.0f, 0.05f);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t width : SizesUpTo(33, {1024, 16387})) {
      const int64_t tokens = 7, n_mix = 3;
      Misaligned<bf16> x(tokens * width);
      Misaligned<float> fn(n_mix * width);
      FillBf16(x.data(), tokens * width, rng, 2.0f);
      for (int64_t i = 0; i < n_mix * width; ++i) fn[i] = dist(rng);
      std::vector<float> got(tokens * n_mix), want(tokens * n_mix);
      HcMixes(x.data(), tokens, width, fn.data(), n_mix, 1e-6f, got.data(), nullptr);
      ref::HcMixes(x.data(), tokens, width, fn.data(), n_mix, 1e-6f, want.data());
      if (width == 0) continue;  // 0/0: no rms to compare
      for (int64_t t = 0; t < tokens; ++t) {
        double ss = 0;
        for (int64_t i = 0; i < width; ++i) ss += std::pow(Bf16ToF32(x[t * width + i]), 2);
        const double inv = 1.0 / std::sqrt(ss / width + 1e-6);
        for (int64_t n = 0; n < n_mix; ++n) {
          double abs_dot = 0;
          for (int64_t i = 0; i < width; ++i) {
            abs_dot += std::fabs(Bf16ToF32(x[t * width + i]) * fn[n * width + i]);
          }
          const double w = static_cast<double>(width);
          const double want_v = want[t * n_mix + n];
          const double bound = 2 * w * kU * abs_dot * inv + (w + 8) * kU * std::fabs(want_v);
          EXPECT_LE(std::fabs(got[t * n_mix + n] - want_v), bound)
              << "width " << width << " t " << t << " n " << n << " " << IsaName(isa);
        }
      }
      // Tokens 0-3 run as a group of 4 on AVX-512 (one fn load for all), 4
      // and 5 as a pair, token 6 alone (AVX2: pairs, then one alone): each
      // bitwise what it gives alone, at every width's tail.
      for (int64_t t = 0; t < tokens; ++t) {
        std::vector<float> one(n_mix);
        HcMixes(x.data() + t * width, 1, width, fn.data(), n_mix, 1e-6f, one.data(), nullptr);
        for (int64_t n = 0; n < n_mix; ++n) {
          EXPECT_EQ(F32ToBits(one[n]), F32ToBits(got[t * n_mix + n]))
              << "width " << width << " t " << t << " n " << n << " " << IsaName(isa);
        }
      }
    }
  }
}

struct AttnCase {
  int64_t tokens, heads, dim, list_len;
};

// Random attention problem: kv pool, per-token lists with holes (first entry
// always valid), head 1 peaked (q x 6).
struct AttnProblem {
  AttnProblem(const AttnCase& c, std::mt19937& rng)
      : q(c.tokens * c.heads * c.dim), kv(40 * c.dim), rows(c.tokens * c.list_len), sink(c.heads) {
    FillBf16(q.data(), q.size(), rng, 1.0f);
    FillBf16(kv.data(), kv.size(), rng, 1.0f);
    for (int64_t t = 0; t < c.tokens; ++t) {
      for (int64_t h = 1; h < std::min<int64_t>(c.heads, 2); ++h) {
        for (int64_t d = 0; d < c.dim; ++d) {
          bf16& v = q[(t * c.heads + h) * c.dim + d];
          v = F32ToBf16(Bf16ToF32(v) * 6.0f);
        }
      }
    }
    std::uniform_int_distribution<int> pick(0, 39), hole(0, 9);
    for (int64_t i = 0; i < c.tokens * c.list_len; ++i) {
      const bool first = i % c.list_len == 0;
      rows[i] = (!first && hole(rng) < 3) ? nullptr : kv.data() + pick(rng) * c.dim;
    }
    for (int64_t h = 0; h < c.heads; ++h) sink[h] = static_cast<float>(h % 5) - 2.0f;
    scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(c.dim)));
  }
  Misaligned<bf16> q;
  Misaligned<bf16> kv;
  std::vector<const bf16*> rows;
  std::vector<float> sink;
  float scale;
};

// Bound per output element (both versions share the block structure):
// logits differ by <= delta = 2*dim*u*max_j sum|q kv_j|*scale; the unrounded
// p_j and Z then move by <= 2*delta + 4u (the SIMD exp is within 2 ulp of
// expf; + list_len*u for the sums), and a rounded p_j by that plus one BF16
// ulp (<= 2^-7 p_j).  So
// |do| <= sum_j (2^-7 + 2 delta + 4u) p_j |kv_j| / Z + |o| (2 delta + 2 n u + 4u) + ulp(o).
double AttnBound(const AttnCase& c, const AttnProblem& p, int64_t t, int64_t h, int64_t d,
                 double o) {
  const bf16* qh = p.q.data() + (t * c.heads + h) * c.dim;
  std::vector<double> l;
  std::vector<const bf16*> live;
  double max_abs = 0, m = -INFINITY;
  for (int64_t j = 0; j < c.list_len; ++j) {
    const bf16* row = p.rows[t * c.list_len + j];
    if (row == nullptr) continue;
    double dot = 0, abs_dot = 0;
    for (int64_t k = 0; k < c.dim; ++k) {
      dot += static_cast<double>(Bf16ToF32(qh[k])) * Bf16ToF32(row[k]);
      abs_dot += std::fabs(static_cast<double>(Bf16ToF32(qh[k])) * Bf16ToF32(row[k]));
    }
    l.push_back(dot * p.scale);
    live.push_back(row);
    max_abs = std::max(max_abs, abs_dot * p.scale);
    m = std::max(m, dot * p.scale);
  }
  const double delta = 2.0 * c.dim * kU * max_abs;
  double z = std::exp(p.sink[h] - m), weighted = 0;
  for (size_t j = 0; j < l.size(); ++j) {
    z += std::exp(l[j] - m);
    weighted += std::exp(l[j] - m) * std::fabs(Bf16ToF32(live[j][d]));
  }
  const double n = static_cast<double>(c.list_len);
  return (1.0 / 128 + 2 * delta + 4 * kU) * weighted / z +
         std::fabs(o) * (2 * delta + 2 * n * kU + 4 * kU) + Bf16Ulp(o);
}

TEST(OpsSimdTest, SparseAttentionMatchesReference) {
  std::mt19937 rng(3);
  std::vector<AttnCase> cases;
  for (int64_t dim : SizesUpTo(33, {128, 512})) cases.push_back({2, 3, dim == 0 ? 1 : dim, 70});
  for (int64_t heads : {1, 4, 8, 13}) cases.push_back({2, heads, 128, 65});
  for (int64_t len : {1, 63, 64, 130}) cases.push_back({3, 9, 64, len});
  ThreadPool pool(3);
  for (const AttnKernel& k : AttnKernels(SimdIsas())) {
    ScopedAttnKernel scoped(k);
    for (const AttnCase& c : cases) {
      AttnProblem p(c, rng);
      const int64_t n_out = c.tokens * c.heads * c.dim;
      Misaligned<bf16> got(n_out), want(n_out);
      SparseAttention(p.q.data(), c.tokens, c.heads, c.dim, p.rows.data(), c.list_len,
                      p.sink.data(), p.scale, got.data(), &pool);
      ref::SparseAttention(p.q.data(), c.tokens, c.heads, c.dim, p.rows.data(), c.list_len,
                           p.sink.data(), p.scale, want.data());
      for (int64_t i = 0; i < n_out; ++i) {
        const double g = Bf16ToF32(got[i]), w = Bf16ToF32(want[i]);
        if (g == w) continue;
        const int64_t t = i / (c.heads * c.dim), h = (i / c.dim) % c.heads, d = i % c.dim;
        ASSERT_LE(std::fabs(g - w), AttnBound(c, p, t, h, d, w))
            << k.Name() << " dim " << c.dim << " heads " << c.heads << " len " << c.list_len
            << " at t " << t << " h " << h << " d " << d;
      }
    }
  }
}

// The SIMD tiles run the reference's exact operation sequence per entry.
TEST(OpsSimdTest, IndexerScoresEqualReference) {
  std::mt19937 rng(4);
  ThreadPool pool(3);
  for (Isa isa : SimdIsas()) {
    ScopedIsa scoped(isa);
    for (int64_t dim : SizesUpTo(33, {128})) {
      for (int64_t heads : {1, 3, 9, 64}) {
        const int64_t tokens = 3, max_entries = 37;
        Misaligned<bf16> q(tokens * heads * dim), w(tokens * heads), keys(max_entries * dim);
        FillBf16(q.data(), tokens * heads * dim, rng, 1.0f);
        FillBf16(w.data(), tokens * heads, rng, 0.3f);
        FillBf16(keys.data(), max_entries * dim, rng, 1.0f);
        std::vector<const bf16*> key_rows(max_entries);
        for (int64_t e = 0; e < max_entries; ++e) key_rows[e] = keys.data() + e * dim;
        const std::vector<int64_t> n_entries = {37, 17, 0};
        std::vector<float> got(tokens * max_entries), want(tokens * max_entries);
        IndexerScores(q.data(), tokens, heads, dim, w.data(), key_rows.data(), max_entries,
                      n_entries.data(), got.data(), &pool);
        ref::IndexerScores(q.data(), tokens, heads, dim, w.data(), key_rows.data(), max_entries,
                           n_entries.data(), want.data());
        for (size_t i = 0; i < got.size(); ++i) {
          ASSERT_EQ(F32ToBits(got[i]), F32ToBits(want[i]))
              << IsaName(isa) << " dim " << dim << " heads " << heads << " at " << i;
        }
      }
    }
  }
}

// Makes every attention logit order-sensitive: dims 0 and dim/2 contribute
// +-65536 (same lane for 8- and 16-lane vectors), so the small products
// accumulated in between lose bits that the final cancellation exposes.  Any
// change of a head's FP32 operation sequence then shows in the BF16 outputs.
void MakeCancelling(AttnProblem& p, const AttnCase& c) {
  for (int64_t i = 0; i < c.tokens * c.heads; ++i) {
    p.q[i * c.dim] = F32ToBf16(256.0f);
    p.q[i * c.dim + c.dim / 2] = F32ToBf16(-256.0f);
  }
  for (int64_t r = 0; r < 40; ++r) {
    p.kv[r * c.dim] = F32ToBf16(256.0f);
    p.kv[r * c.dim + c.dim / 2] = F32ToBf16(256.0f);
  }
}

// Each token must come out bitwise the same whether it shares a call with six
// others or runs alone, and whatever the thread count (which changes how a
// token's heads are grouped per kv pass: 8/4/1 on one thread, 4+4+4+1 on
// three, 4+1+1 / 4+1+1+1 on two), on every ISA.
TEST(OpsSimdTest, BatchInvariance) {
  std::mt19937 rng(5);
  ThreadPool pool(3), pool2(2);
  const int64_t tokens = 7, heads = 13, dim = 512, width = 4 * 512, n_mix = 24;
  for (const AttnKernel& k : AttnKernels(IsasToTest())) {
    ScopedAttnKernel scoped(k);
    const Isa isa = k.isa;
    const AttnCase c{tokens, heads, dim, 150};
    AttnProblem p(c, rng);
    MakeCancelling(p, c);
    std::vector<bf16> batch(tokens * heads * dim);
    SparseAttention(p.q.data(), tokens, heads, dim, p.rows.data(), c.list_len, p.sink.data(),
                    p.scale, batch.data(), nullptr);
    for (ThreadPool* tp : {&pool, &pool2}) {
      std::vector<bf16> batch_mt(batch.size()), single(batch.size());
      SparseAttention(p.q.data(), tokens, heads, dim, p.rows.data(), c.list_len, p.sink.data(),
                      p.scale, batch_mt.data(), tp);
      for (int64_t t = 0; t < tokens; ++t) {
        SparseAttention(p.q.data() + t * heads * dim, 1, heads, dim, p.rows.data() + t * c.list_len,
                        c.list_len, p.sink.data(), p.scale, single.data() + t * heads * dim, tp);
      }
      EXPECT_EQ(testing::CountUlpDiffs(batch_mt, batch, 0), 0)
          << "attention, " << tp->num_threads() << " threads, " << k.Name();
      EXPECT_EQ(testing::CountUlpDiffs(single, batch, 0), 0)
          << "attention, 1-token calls, " << tp->num_threads() << " threads, " << k.Name();
    }

    std::vector<bf16> x(tokens * width);
    std::vector<float> fn(n_mix * width);
    FillBf16(x.data(), x.size(), rng, 1.0f);
    for (float& v : fn) v = Bf16ToF32(F32ToBf16(static_cast<float>(rng() % 1000) * 1e-4f));
    std::vector<float> mix_batch(tokens * n_mix), mix_single(tokens * n_mix);
    HcMixes(x.data(), tokens, width, fn.data(), n_mix, 1e-6f, mix_batch.data(), &pool);
    for (int64_t t = 0; t < tokens; ++t) {
      HcMixes(x.data() + t * width, 1, width, fn.data(), n_mix, 1e-6f,
              mix_single.data() + t * n_mix, nullptr);
    }
    for (size_t i = 0; i < mix_batch.size(); ++i) {
      EXPECT_EQ(F32ToBits(mix_batch[i]), F32ToBits(mix_single[i])) << "mixes " << IsaName(isa);
    }

    std::vector<bf16> y_batch(tokens * width), y_single(tokens * width), w(width);
    FillBf16(w.data(), width, rng, 1.0f);
    RmsNorm(x.data(), tokens, width, w.data(), 1e-6f, y_batch.data());
    for (int64_t t = 0; t < tokens; ++t) {
      RmsNorm(x.data() + t * width, 1, width, w.data(), 1e-6f, y_single.data() + t * width);
    }
    EXPECT_EQ(testing::CountUlpDiffs(y_batch, y_single, 0), 0) << "rmsnorm " << IsaName(isa);

    const int64_t ih = 64, idim = 128, entries = 100;
    std::vector<bf16> iq(tokens * ih * idim), iw(tokens * ih), keys(entries * idim);
    FillBf16(iq.data(), iq.size(), rng, 1.0f);
    FillBf16(iw.data(), iw.size(), rng, 0.2f);
    FillBf16(keys.data(), keys.size(), rng, 1.0f);
    std::vector<const bf16*> key_rows(entries);
    for (int64_t e = 0; e < entries; ++e) key_rows[e] = keys.data() + e * idim;
    std::vector<int64_t> n_entries(tokens);
    for (int64_t t = 0; t < tokens; ++t) n_entries[t] = 20 + 11 * t;
    std::vector<float> s_batch(tokens * entries), s_single(tokens * entries);
    IndexerScores(iq.data(), tokens, ih, idim, iw.data(), key_rows.data(), entries,
                  n_entries.data(), s_batch.data(), &pool);
    for (int64_t t = 0; t < tokens; ++t) {
      IndexerScores(iq.data() + t * ih * idim, 1, ih, idim, iw.data() + t * ih, key_rows.data(),
                    entries, n_entries.data() + t, s_single.data() + t * entries, nullptr);
    }
    for (size_t i = 0; i < s_batch.size(); ++i) {
      EXPECT_EQ(F32ToBits(s_batch[i]), F32ToBits(s_single[i])) << "indexer " << IsaName(isa);
    }
  }
}

}  // namespace
}  // namespace dsv4::kernels

namespace dsv4::kernels {
namespace {

// Manual timing of decode-shaped calls per ISA, one thread (not a correctness
// test):
//   kernel_ops_test --gtest_also_run_disabled_tests --gtest_filter='*Timing*'
TEST(OpsSimdTest, DISABLED_DecodeTiming) {
  std::mt19937 rng(6);
  // Process CPU time (all calls run on this thread): steadier than wall time
  // on a shared host.
  auto time_ms = [](auto&& fn, int reps) {
    fn();
    const std::clock_t start = std::clock();
    for (int i = 0; i < reps; ++i) fn();
    return 1000.0 * static_cast<double>(std::clock() - start) / CLOCKS_PER_SEC / reps;
  };
  const AttnCase c{1, 64, 512, 640};
  AttnProblem p(c, rng);
  std::vector<bf16> o(64 * 512);
  const int64_t width = 16384, n_mix = 24;
  std::vector<bf16> x(width);
  std::vector<float> fn(n_mix * width), mixes(n_mix);
  FillBf16(x.data(), width, rng, 1.0f);
  for (float& v : fn) v = 1e-3f * static_cast<float>(rng() % 100);
  const int64_t entries = 16384;
  std::vector<bf16> iq(64 * 128), iw(64), keys(entries * 128);
  FillBf16(iq.data(), iq.size(), rng, 1.0f);
  FillBf16(iw.data(), iw.size(), rng, 0.2f);
  FillBf16(keys.data(), keys.size(), rng, 1.0f);
  std::vector<const bf16*> key_rows(entries);
  for (int64_t e = 0; e < entries; ++e) key_rows[e] = keys.data() + e * 128;
  std::vector<float> score(entries);
  std::vector<bf16> y(4 * 4096), w(4096);
  for (Isa isa : IsasToTest()) {
    ScopedIsa scoped(isa);
    const double attn = time_ms(
        [&] {
          SparseAttention(p.q.data(), 1, 64, 512, p.rows.data(), 640, p.sink.data(), p.scale,
                          o.data(), nullptr);
        },
        5);
    const double mix = time_ms(
        [&] { HcMixes(x.data(), 1, width, fn.data(), n_mix, 1e-6f, mixes.data(), nullptr); }, 20);
    const int64_t n = entries;
    const double idx = time_ms(
        [&] {
          IndexerScores(iq.data(), 1, 64, 128, iw.data(), key_rows.data(), entries, &n,
                        score.data(), nullptr);
        },
        3);
    const double norm = time_ms([&] { RmsNorm(x.data(), 4, 4096, w.data(), 1e-6f, y.data()); }, 50);
    std::vector<bf16> qh(64 * 512);
    FillBf16(qh.data(), qh.size(), rng, 1.0f);
    const double qrms = time_ms([&] { QHeadRms(qh.data(), 64, 512, 1e-6f); }, 50);
    std::printf(
        "%-7s attn(64h x 640 x 512) %.3f ms | hc_mixes(24 x 16384) %.3f ms | "
        "indexer(64h x 16384 x 128) %.3f ms | rmsnorm(4 x 4096) %.4f ms | "
        "q_rms(64 x 512) %.4f ms\n",
        std::string(IsaName(isa)).c_str(), attn, mix, idx, norm, qrms);
  }
}

}  // namespace
}  // namespace dsv4::kernels
