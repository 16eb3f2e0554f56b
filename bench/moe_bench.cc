// MoE routing, dispatch and compressor pooling at DeepSeek-V4-Flash shapes
// (256 experts, top-6, D = 4096; pooled entries of 8 and 128 rows): the
// non-GEMM work of a MoE layer and of a compressor, per call, one thread.
//
//   dsv4_moe_bench
//
// Argument: tokens in the call (1 = a decode step).
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstring>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/compressor.h"
#include "kernels/moe.h"
#include "kernels/moe_routing.h"

namespace dsv4::kernels {
namespace {

constexpr int64_t kExperts = 256;
constexpr int64_t kTopK = 6;
constexpr int64_t kDim = 4096;

std::vector<float> Normal(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<float> v(static_cast<size_t>(n));
  for (float& x : v) x = g(rng);
  return v;
}

// Router after the GEMM: scores, biased top-k, weights.
void BM_Route(benchmark::State& state) {
  const int64_t n = state.range(0);
  const std::vector<float> logits = Normal(n * kExperts, 1);
  const std::vector<float> bias = Normal(kExperts, 2);
  std::vector<float> s(logits.size()), w(n * kTopK);
  std::vector<int32_t> ids(n * kTopK);
  for (auto _ : state) {
    SqrtSoftplus(logits.data(), n * kExperts, s.data());
    BiasedTopK(s.data(), bias.data(), n, kExperts, kTopK, ids.data(), nullptr);
    RouteWeights(s.data(), n, kExperts, ids.data(), kTopK, 1.5f, w.data(), nullptr);
    benchmark::DoNotOptimize(w.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// Dispatch around the expert GEMMs: sort by expert, gather each expert's
// activation rows, scatter-add its outputs, combine with the shared expert.
void BM_Dispatch(benchmark::State& state) {
  const int64_t n = state.range(0);
  const int64_t na = n * kTopK, nb = kDim / 128;
  std::vector<int32_t> ids(na);
  std::mt19937 rng(3);
  std::vector<int32_t> perm(kExperts);
  std::iota(perm.begin(), perm.end(), 0);
  for (int64_t t = 0; t < n; ++t) {
    std::shuffle(perm.begin(), perm.end(), rng);
    std::copy_n(perm.begin(), kTopK, ids.begin() + t * kTopK);
  }
  const std::vector<float> rw = Normal(na, 4), xs = Normal(n * nb, 5);
  std::vector<uint8_t> xq(n * kDim, 0x38), eq(n * kDim);
  std::vector<float> es(n * nb), pw(na), acc(n * kDim);
  std::vector<int64_t> off(kExperts + 1), tok(na);
  std::vector<bf16> ye(n * kDim, F32ToBf16(0.5f)), shared(n * kDim, F32ToBf16(0.25f)), y(n * kDim);
  for (auto _ : state) {
    SortByExpert(ids.data(), rw.data(), n, kTopK, kExperts, off.data(), tok.data(), pw.data());
    std::memset(acc.data(), 0, acc.size() * sizeof(float));
    for (int64_t e = 0; e < kExperts; ++e) {
      const int64_t m = off[e + 1] - off[e];
      if (m == 0) continue;
      GatherRows(xq.data(), xs.data(), kDim, nb, tok.data() + off[e], m, eq.data(), es.data());
      ScatterAddRows(ye.data(), tok.data() + off[e], m, kDim, acc.data(), nullptr);
    }
    CombineExperts(acc.data(), shared.data(), n, kDim, y.data(), nullptr);
    benchmark::DoNotOptimize(y.data());
  }
  state.SetItemsProcessed(state.iterations() * n);
}

// One compressed entry of width 512 from `rows` ring rows.
void BM_SoftmaxPool(benchmark::State& state) {
  const int64_t rows = state.range(0), d = 512;
  const std::vector<float> kv = Normal(rows * d, 6), score = Normal(rows * d, 7);
  std::vector<const float*> kr(rows), sr(rows);
  for (int64_t j = 0; j < rows; ++j) {
    kr[j] = kv.data() + j * d;
    sr[j] = score.data() + j * d;
  }
  std::vector<bf16> out(d);
  for (auto _ : state) {
    SoftmaxPool(kr.data(), sr.data(), rows, d, out.data());
    benchmark::DoNotOptimize(out.data());
  }
}

BENCHMARK(BM_Route)->Arg(1)->Arg(16)->Arg(128)->ArgName("tokens")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Dispatch)->Arg(1)->Arg(16)->Arg(128)->ArgName("tokens")->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_SoftmaxPool)->Arg(8)->Arg(128)->ArgName("rows")->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace dsv4::kernels

BENCHMARK_MAIN();
