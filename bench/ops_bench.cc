// The non-GEMM kernels of a decode step at DeepSeek-V4-Flash shapes: sparse
// attention (64 heads, latent dim 512, one shared kv row per entry), the
// lightning indexer's scores and the mHC mixes, next to the FP32 FMA peak
// loop of the same threads, so the ratio is read from one run:
//
//   dsv4_ops_bench --benchmark_enable_random_interleaving=true
//
// A CSA layer's list is the window's 128 rows plus the indexer's top 512 of
// the compressed entries (640 rows at contexts of 2k and more; 141 at a
// 128-token context).  "layers" cycles that many caches, each with its own
// rows: 1 keeps the rows in the L2/L3 (the kernel's compute rate), 32 puts
// 70 MB of rows between two visits of a layer, so each call reads its
// scattered rows from DRAM as a decode step of the model does.
//
// Arguments: {isa (1 avx2, 2 avx512: BF16 dot products where the CPU has
// them, 3 avx512 with the FMA kernel), list rows, threads, layers}.
//
// BM_IndexerQueries/Prefill: the indexer's per-token query work between its
// two projections (RoPE, then the Hadamard rotation of 64 heads x 128) for a
// 256-token prefill chunk, on 1 and 2 threads: scalar kernels whose rows the
// pool splits.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <cmath>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/attention.h"
#include "kernels/cpu/ops_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/hadamard.h"
#include "kernels/indexer.h"
#include "kernels/mhc.h"
#include "kernels/moe.h"
#include "kernels/peak.h"
#include "kernels/rope.h"
#include "tensor/tensor.h"

namespace dsv4::kernels {
namespace {

constexpr int64_t kHeads = 64;
constexpr int64_t kDim = 512;
constexpr int64_t kWindow = 128;
// Compressed entries of a ratio-4 layer at an 8k context.
constexpr int64_t kCompressed = 2048;

// One layer's cache (window ring + compressed entries, in 2 MiB pages as
// the model's cache) and one decode token's list into it: the window in
// ring order, then distinct compressed entries in random order.
struct LayerCache {
  Buffer rows;
  std::vector<const bf16*> list;
};

LayerCache MakeLayer(int64_t list_len, std::mt19937& rng) {
  const int64_t n_rows = kWindow + kCompressed;
  LayerCache l{Buffer(n_rows * kDim * static_cast<int64_t>(sizeof(bf16))), {}};
  std::normal_distribution<float> normal(0.0f, 1.0f);
  bf16* r = l.rows.as<bf16>();
  for (int64_t i = 0; i < n_rows * kDim; ++i) r[i] = F32ToBf16(normal(rng));
  std::vector<int64_t> compressed(kCompressed);
  std::iota(compressed.begin(), compressed.end(), kWindow);
  std::shuffle(compressed.begin(), compressed.end(), rng);
  for (int64_t j = 0; j < list_len; ++j) {
    const int64_t row = j < kWindow ? j : compressed[j - kWindow];
    l.list.push_back(r + row * kDim);
  }
  return l;
}

constexpr int64_t kAvx512Fma = 3;

// Selects the ISA of state.range(0) (kAvx512Fma where `fma_arg`: AVX-512
// with the FMA attention kernel); false, and the benchmark skipped, if the
// CPU lacks it.
bool SelectIsa(benchmark::State& state, bool fma_arg) {
  const bool fma = fma_arg && state.range(0) == kAvx512Fma;
  const Isa isa = fma ? Isa::kAvx512 : static_cast<Isa>(state.range(0));
  if (isa > BestSupportedIsa()) {
    state.SkipWithError("ISA not supported by this CPU");
    return false;
  }
  SetIsaForTesting(isa);
  cpu::UseAttentionWithoutBf16DotForTesting(fma);
  state.SetLabel(std::string(IsaName(isa)) + (fma ? " fma" : ""));
  return true;
}

// {isa: AVX2, AVX-512} x {layers: 1, `cold`} on up to 2 threads.
void IsaLayersArgs(benchmark::internal::Benchmark* b, int64_t cold) {
  const int64_t all = std::min<int64_t>(ThreadPool::DefaultThreads(), 2);
  for (int64_t isa : {int64_t{1}, int64_t{2}}) {
    for (int64_t layers : {int64_t{1}, cold}) b->Args({isa, all, layers});
  }
  b->ArgNames({"isa", "threads", "layers"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

void BM_AttentionDecode(benchmark::State& state) {
  if (!SelectIsa(state, true)) return;
  const int64_t list_len = state.range(1), threads = state.range(2), layers = state.range(3);
  std::mt19937 rng(11);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<LayerCache> caches;
  for (int64_t i = 0; i < layers; ++i) caches.push_back(MakeLayer(list_len, rng));
  std::vector<bf16> q(kHeads * kDim), o(kHeads * kDim);
  for (bf16& v : q) v = F32ToBf16(normal(rng));
  std::vector<float> sink(kHeads);
  for (float& v : sink) v = normal(rng);
  const float scale = 1.0f / std::sqrt(static_cast<float>(kDim));
  std::unique_ptr<ThreadPool> pool =
      threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
  int64_t layer = 0;
  for (auto _ : state) {
    SparseAttention(q.data(), 1, kHeads, kDim, caches[layer].list.data(), list_len, sink.data(),
                    scale, o.data(), pool.get());
    benchmark::DoNotOptimize(o.data());
    layer = (layer + 1) % layers;
  }
  // Logits and P.V: one multiply-add each per head, entry and dim.
  const double flops = 4.0 * kHeads * list_len * kDim;
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
  SetIsaForTesting(BestSupportedIsa());
  cpu::UseAttentionWithoutBf16DotForTesting(false);
}

// The lightning indexer's scores for one decode token at an 8k context on
// a ratio-4 layer: 64 heads x 128 dims against 2048 compressed keys (BF16
// rows, contiguous as in the cache's pages), `layers` key sets cycled as
// above.  GFLOP/s counts a multiply and an add per head, key and dim.
void BM_IndexerDecode(benchmark::State& state) {
  if (!SelectIsa(state, false)) return;
  constexpr int64_t kIndexHeads = 64, kIndexDim = 128;
  const int64_t threads = state.range(1), layers = state.range(2);
  std::mt19937 rng(12);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Buffer> keys;
  std::vector<std::vector<const bf16*>> rows(layers);
  for (int64_t l = 0; l < layers; ++l) {
    keys.emplace_back(kCompressed * kIndexDim * static_cast<int64_t>(sizeof(bf16)));
    bf16* k = keys.back().as<bf16>();
    for (int64_t i = 0; i < kCompressed * kIndexDim; ++i) k[i] = F32ToBf16(normal(rng));
    for (int64_t e = 0; e < kCompressed; ++e) rows[l].push_back(k + e * kIndexDim);
  }
  std::vector<bf16> q(kIndexHeads * kIndexDim), w(kIndexHeads);
  for (bf16& v : q) v = F32ToBf16(normal(rng));
  for (bf16& v : w) v = F32ToBf16(0.1f * normal(rng));
  std::vector<float> score(kCompressed);
  std::unique_ptr<ThreadPool> pool =
      threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
  int64_t layer = 0;
  for (auto _ : state) {
    IndexerScores(q.data(), 1, kIndexHeads, kIndexDim, w.data(), rows[layer].data(), kCompressed,
                  &kCompressed, score.data(), pool.get());
    benchmark::DoNotOptimize(score.data());
    layer = (layer + 1) % layers;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * kIndexHeads * kIndexDim * kCompressed * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  SetIsaForTesting(BestSupportedIsa());
}

// mHC around one decode step's block (hc 4 x hidden 4096) for `tokens` rows
// (1: a decode step, 2: a K = 1 verify): `stages` 0 the pre-mix projection
// alone (HcMixes: 24 mixes x 16384, FP32 weights, 1.5 MB), 1 and the
// Sinkhorn split, 2 and the weighted sum (all of HcPre), 3 and HcPost.  `layers` weight sets
// cycled (24 = 36 MB: from DRAM, as the model's 86 calls per step on Flash).
void BM_HcDecode(benchmark::State& state) {
  if (!SelectIsa(state, false)) return;
  constexpr int64_t kHc = 4, kHidden = 4096, kMixes = (2 + kHc) * kHc, kWidth = kHc * kHidden;
  const int64_t threads = state.range(1), layers = state.range(2), tokens = state.range(3);
  const int64_t stages = state.range(4);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Buffer> fn;
  for (int64_t l = 0; l < layers; ++l) {
    fn.emplace_back(kMixes * kWidth * static_cast<int64_t>(sizeof(float)));
    float* f = fn.back().as<float>();
    for (int64_t i = 0; i < kMixes * kWidth; ++i) f[i] = 0.01f * normal(rng);
  }
  std::vector<bf16> x(tokens * kWidth), a(tokens * kHidden), y(tokens * kWidth);
  for (bf16& v : x) v = F32ToBf16(normal(rng));
  for (bf16& v : a) v = F32ToBf16(normal(rng));
  std::vector<float> mixes(tokens * kMixes), pre(tokens * kHc), post(tokens * kHc),
      comb(tokens * kHc * kHc), base(kMixes, 0.1f), scale(3, 1.0f);
  std::unique_ptr<ThreadPool> pool =
      threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
  int64_t layer = 0;
  for (auto _ : state) {
    HcMixes(x.data(), tokens, kWidth, fn[layer].as<float>(), kMixes, 1e-6f, mixes.data(),
            pool.get());
    if (stages >= 1) {
      HcSplitSinkhorn(mixes.data(), tokens, kHc, scale.data(), base.data(), 20, 1e-6f, pre.data(),
                      post.data(), comb.data(), pool.get());
    }
    if (stages >= 2) {
      HcWeightedSum(x.data(), tokens, kHc, kHidden, pre.data(), a.data(), pool.get());
    }
    if (stages >= 3) {
      HcPost(a.data(), x.data(), tokens, kHc, kHidden, post.data(), comb.data(), y.data(),
             pool.get());
    }
    benchmark::DoNotOptimize(mixes.data());
    benchmark::DoNotOptimize(y.data());
    layer = (layer + 1) % layers;
  }
  state.SetBytesProcessed(state.iterations() * kMixes * kWidth *
                          static_cast<int64_t>(sizeof(float)));
  SetIsaForTesting(BestSupportedIsa());
}

// SwiGLU of an expert body's gate/up rows (inter 2048, the routing weight
// applied): 7 rows (a decode step's 6 routed experts and the shared one,
// row by row) or 384 (one expert's rows in a 512-token prefill of an
// 8-expert layer).  isa 0 is the scalar table loop.
void BM_SwiGlu(benchmark::State& state) {
  if (!SelectIsa(state, false)) return;
  constexpr int64_t kInter = 2048;
  const int64_t rows = state.range(1);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<bf16> gate(rows * kInter), up(rows * kInter), h(rows * kInter);
  for (bf16& v : gate) v = F32ToBf16(normal(rng));
  for (bf16& v : up) v = F32ToBf16(normal(rng));
  std::vector<float> weight(rows, 0.125f);
  for (auto _ : state) {
    SwiGlu(gate.data(), up.data(), rows, kInter, 10.0f, weight.data(), h.data());
    benchmark::DoNotOptimize(h.data());
  }
  state.SetItemsProcessed(state.iterations() * rows * kInter);
  SetIsaForTesting(BestSupportedIsa());
}

// RoPE and the Hadamard rotation of a prefill chunk's indexer queries
// [256 tokens, 64 heads, 128] (Indexer::Queries after wq_b).
void BM_IndexerQueriesPrefill(benchmark::State& state) {
  constexpr int64_t kTokens = 256, kQHeads = 64, kQDim = 128, kRope = 64;
  const int64_t threads = state.range(0);
  std::mt19937 rng(17);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> q(kTokens * kQHeads * kQDim);
  for (bf16& v : q) v = F32ToBf16(normal(rng));
  std::vector<int64_t> pos(kTokens);
  std::iota(pos.begin(), pos.end(), int64_t{1000});
  std::vector<float> freqs(kRope / 2);
  RopeFrequencies(10000, kRope, YarnParams{}, freqs.data());
  std::unique_ptr<ThreadPool> pool =
      threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
  for (auto _ : state) {
    ApplyRope(q.data(), kTokens, kQHeads, kQDim, kRope, pos.data(), freqs.data(), false,
              pool.get());
    HadamardBf16(q.data(), kTokens * kQHeads, kQDim, pool.get());
    benchmark::DoNotOptimize(q.data());
  }
  state.SetItemsProcessed(state.iterations() * kTokens);
}

// The FP32 FMA peak loop (kernels/peak.h) on the same number of threads, in
// the same GFLOP/s (2 per multiply-add).
void BM_PeakFma(benchmark::State& state) {
  const int64_t threads = state.range(0);
  constexpr int64_t kIterations = 1 << 20;
  std::unique_ptr<ThreadPool> pool =
      threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
  for (auto _ : state) {
    ParallelFor(pool.get(), threads, 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        benchmark::DoNotOptimize(RunPeakLoop(PeakMix::kFp32Fma, kIterations));
      }
    });
  }
  const double flops = 2.0 * threads * PeakLoopMultiplyAdds(PeakMix::kFp32Fma, kIterations);
  state.counters["GFLOP/s"] =
      benchmark::Counter(flops * 1e-9, benchmark::Counter::kIsIterationInvariantRate);
}

void DecodeArgs(benchmark::internal::Benchmark* b) {
  const int64_t all = std::min<int64_t>(ThreadPool::DefaultThreads(), 2);
  for (int64_t isa : {int64_t{1}, int64_t{2}, kAvx512Fma}) {
    for (int64_t threads = 1; threads <= all; ++threads) {
      for (int64_t layers : {1, 32}) b->Args({isa, 640, threads, layers});
    }
  }
  b->Args({2, 141, all, 32});
  b->Args({kAvx512Fma, 141, all, 32});
  b->ArgNames({"isa", "list", "threads", "layers"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// {threads}: 1, and 2 where the machine has them.
void ThreadsArgs(benchmark::internal::Benchmark* b) {
  b->Arg(1);
  if (ThreadPool::DefaultThreads() > 1) b->Arg(std::min<int64_t>(ThreadPool::DefaultThreads(), 2));
  b->ArgName("threads")->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_AttentionDecode)->Name("BM_Attention/Decode")->Apply(DecodeArgs);
BENCHMARK(BM_IndexerDecode)
    ->Name("BM_Indexer/Decode")
    ->Apply([](benchmark::internal::Benchmark* b) { IsaLayersArgs(b, 32); });
BENCHMARK(BM_HcDecode)->Name("BM_Hc/Decode")->Apply([](benchmark::internal::Benchmark* b) {
  const int64_t all = std::min<int64_t>(ThreadPool::DefaultThreads(), 2);
  for (int64_t isa : {int64_t{1}, int64_t{2}}) {
    for (int64_t layers : {int64_t{1}, int64_t{24}}) {
      for (int64_t tokens : {1, 2}) {
        for (int64_t stages : {0, 1, 2, 3}) b->Args({isa, all, layers, tokens, stages});
      }
    }
  }
  b->ArgNames({"isa", "threads", "layers", "tokens", "stages"})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
});
BENCHMARK(BM_IndexerQueriesPrefill)->Name("BM_IndexerQueries/Prefill")->Apply(ThreadsArgs);
BENCHMARK(BM_SwiGlu)
    ->ArgsProduct({{0, 1, 2}, {7, 384}})
    ->ArgNames({"isa", "rows"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_PeakFma)->Apply(ThreadsArgs);

}  // namespace
}  // namespace dsv4::kernels

BENCHMARK_MAIN();
