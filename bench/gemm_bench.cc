// Linear-layer micro-benchmarks at DeepSeek-V4-Flash shapes: decode GEMV
// (M = 1, memory bound: reported as weight bytes read per second) and a few
// prefill batch sizes, for every ISA path side by side.
//
//   dsv4_gemm_bench --benchmark_filter=Gemv
//
// Arguments: {isa (0 scalar, 1 avx2, 2 avx512), M, threads}.
#include <benchmark/benchmark.h>

#include <algorithm>
#include <atomic>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/cpu/gemm_cpu.h"
#include "kernels/dispatch.h"
#include "kernels/gemm.h"
#include "kernels/moe.h"
#include "kernels/quant.h"
#include "tensor/tensor.h"

namespace dsv4::kernels {
namespace {

struct Shape {
  const char* name;
  int64_t out, in;
};

// [out, in] of the benchmarked weights.
constexpr Shape kWqB{"wq_b", 32768, 1024};
constexpr Shape kSharedW1{"shared_w1", 2048, 4096};
constexpr Shape kExpertW1{"expert_w1", 2048, 4096};
// Eight experts' w1 stacked (32 MB packed): beyond the L3, like a decode step
// that touches many experts.
constexpr Shape kEightExpertsW1{"8_experts_w1", 8 * 2048, 4096};

std::vector<uint8_t> RandomBytes(int64_t n, uint8_t lo, uint8_t hi, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> byte(lo, hi);
  std::vector<uint8_t> v(n);
  for (auto& b : v) {
    b = static_cast<uint8_t>(byte(rng));
    if ((b & 0x7f) == 0x7f) b &= 0xfe;
  }
  return v;
}

// The same bytes in a Buffer: 2 MiB pages from 2 MiB up, as the model's
// repacked weights (a vector's 4 KiB pages stop the hardware prefetchers and
// miss the TLB every 4 KiB, which a weight stream in the model never does).
Buffer RandomBuffer(int64_t n, uint8_t lo, uint8_t hi, uint32_t seed) {
  const std::vector<uint8_t> v = RandomBytes(n, lo, hi, seed);
  Buffer b(v.size());
  std::copy(v.begin(), v.end(), b.as<uint8_t>());
  return b;
}

struct Activation {
  std::vector<uint8_t> codes;
  std::vector<float> scales;
};

Activation RandomActivation(int64_t m, int64_t k) {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> x(m * k);
  for (auto& v : x) v = F32ToBf16(normal(rng));
  Activation a{std::vector<uint8_t>(m * k), std::vector<float>(m * k / 128)};
  ActQuantFp8(x.data(), m, k, 128, a.codes.data(), a.scales.data());
  return a;
}

// state.range(0) past the ISAs: AVX-512 with the FP8 GEMMs on the FMA
// kernel even where the BF16 dot one would run (side by side in one run).
constexpr int64_t kAvx512Fp8Fma = 3;
// And AVX-512 with the FP4 GEMMs on the row kernels only (no outer-product
// kernel for tiles of many rows).
constexpr int64_t kAvx512Fp4Rows = 4;
// And AVX-512 with the FP4 GEMMs on the exact integer kernels (row and
// outer-product) even where the BF16 dot one would run.
constexpr int64_t kAvx512Fp4Exact = 5;

// Selects the ISA of state.range(0); false (and the benchmark skipped) if
// the CPU lacks it.
bool SelectIsa(benchmark::State& state) {
  const bool fp8_fma = state.range(0) == kAvx512Fp8Fma;
  const bool fp4_rows = state.range(0) == kAvx512Fp4Rows;
  const bool fp4_exact = fp4_rows || state.range(0) == kAvx512Fp4Exact;
  const Isa isa = fp8_fma || fp4_exact ? Isa::kAvx512 : static_cast<Isa>(state.range(0));
  if (isa > BestSupportedIsa()) {
    state.SkipWithError("ISA not supported by this CPU");
    return false;
  }
  SetIsaForTesting(isa);
  cpu::UseFp8WithoutBf16DotForTesting(fp8_fma);
  cpu::UseFp4RowKernelsForTesting(fp4_rows);
  cpu::UseFp4WithoutBf16DotForTesting(fp4_exact);
  state.SetLabel(std::string(IsaName(isa)) + (fp8_fma ? " fp8-fma" : "") +
                 (fp4_rows    ? " fp4-rows"
                  : fp4_exact ? " fp4-exact"
                              : ""));
  return true;
}

std::unique_ptr<ThreadPool> MakePool(int64_t threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
}

// Random FP8 codes read in the layout the model packs its FP8 weights into
// for the kernel SelectIsa chose (the panel layout for the BF16 dot kernel):
// random bytes are random in either layout, and the shapes are whole panels.
Fp8Weight InKernelLayout(Fp8Weight w) {
  if (Fp8GemmUsesBf16Dots()) w.layout = Fp8Layout::kPanels;
  return w;
}

void BM_Fp8Gemm(benchmark::State& state, Shape shape) {
  if (!SelectIsa(state)) return;
  const int64_t m = state.range(1);
  const auto codes = RandomBytes(shape.out * shape.in, 0, 255, 1);
  const auto scales = RandomBytes(((shape.out + 127) / 128) * (shape.in / 128), 116, 124, 2);
  const Fp8Weight w = InKernelLayout({codes.data(), scales.data(), shape.out, shape.in});
  const Activation a = RandomActivation(m, shape.in);
  std::vector<bf16> y(m * shape.out);
  auto pool = MakePool(state.range(2));
  for (auto _ : state) {
    Fp8Gemm(a.codes.data(), a.scales.data(), m, w, y.data(), pool.get());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * shape.out * shape.in);
  state.counters["flops"] = benchmark::Counter(
      2.0 * static_cast<double>(m * shape.out * shape.in) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

void BM_Fp4Gemm(benchmark::State& state, Shape shape) {
  if (!SelectIsa(state)) return;
  const int64_t m = state.range(1);
  const auto packed = RandomBytes(shape.out * shape.in / 2, 0, 255, 3);
  const auto scales = RandomBytes(shape.out * shape.in / 32, 118, 126, 4);
  // In the panel layout and in 2 MiB pages, as the model packs its experts
  // at load (docs/performance.md "FP4 tiles: two panels").
  Buffer panel_codes(Fp4PanelPackedBytes(shape.out, shape.in));
  Buffer panel_scales(Fp4PanelScaleBytes(shape.out, shape.in));
  const Fp4Weight w = PackFp4Panels({packed.data(), scales.data(), shape.out, shape.in},
                                    static_cast<uint8_t*>(panel_codes.data()),
                                    static_cast<uint8_t*>(panel_scales.data()));
  const Activation a = RandomActivation(m, shape.in);
  std::vector<bf16> y(m * shape.out);
  auto pool = MakePool(state.range(2));
  for (auto _ : state) {
    Fp4Gemm(a.codes.data(), a.scales.data(), m, w, y.data(), pool.get());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() *
                          (shape.out * shape.in / 2 + shape.out * shape.in / 32));
  state.counters["flops"] = benchmark::Counter(
      2.0 * static_cast<double>(m * shape.out * shape.in) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// wo_a-like BF16 weight (dequantized at conversion): [1024, 4096].
void BM_GemmBf16(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  const int64_t m = state.range(1), n = 1024, k = 4096;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> w(n * k), x(m * k), y(m * n);
  for (auto& v : w) v = F32ToBf16(normal(rng));
  for (auto& v : x) v = F32ToBf16(normal(rng));
  auto pool = MakePool(state.range(2));
  for (auto _ : state) {
    GemmBf16(x.data(), k, m, k, w.data(), n, y.data(), n, pool.get());
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * k * 2);
  state.counters["flops"] = benchmark::Counter(
      2.0 * static_cast<double>(m * n * k) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
}

// attn.o at decode (M = 1, or `m` rows) on the Flash shapes: wo_a grouped (8 groups,
// each [1024, 4096] FP8 read in place with BF16 numerics, one
// GemmBf16Fp8Grouped call as in the model) then
// wo_b ([4096, 8192] FP8, ActQuantFp8 + Fp8Gemm).  Arg `part`: 0 wo_a only,
// 1 wo_b only, 2 both.  The weights of kAttnOLayers layers (256 MiB of each
// part, in 2 MiB pages as the model's) are cycled so that, as in a decode
// step, every call streams from DRAM: with 4 layers (128 MiB) part 0 or 1
// alone ran 1.3x faster than with 8, some of it served from the L3.
constexpr int64_t kAttnOLayers = 8;
constexpr int64_t kGroups = 8, kOLora = 1024, kGroupIn = 4096, kDim = 4096;

void BM_AttnODecode(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  const int64_t part = state.range(1);
  const int64_t za = kGroups * kOLora;  // wo_a rows = wo_b input
  std::vector<Buffer> a_codes, a_scales, b_codes, b_scales;
  for (int64_t l = 0; l < kAttnOLayers; ++l) {
    const auto seed = static_cast<uint32_t>(10 + 4 * l);
    a_codes.push_back(RandomBuffer(za * kGroupIn, 0, 255, seed));
    a_scales.push_back(RandomBuffer((za / 128) * (kGroupIn / 128), 116, 124, seed + 1));
    b_codes.push_back(RandomBuffer(kDim * za, 0, 255, seed + 2));
    b_scales.push_back(RandomBuffer((kDim / 128) * (za / 128), 116, 124, seed + 3));
  }
  std::mt19937 rng(7);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t m = state.range(3);
  std::vector<bf16> o(m * kGroups * kGroupIn), z(m * za), y(m * kDim);
  for (auto& v : o) v = F32ToBf16(normal(rng));
  for (auto& v : z) v = F32ToBf16(normal(rng));
  std::vector<uint8_t> z_codes(m * za);
  std::vector<float> z_scales(m * za / 128);
  auto pool = MakePool(state.range(2));
  int64_t layer = 0;
  for (auto _ : state) {
    if (part != 1) {
      const Fp8Weight w = InKernelLayout(
          {a_codes[layer].as<uint8_t>(), a_scales[layer].as<uint8_t>(), za, kGroupIn});
      GemmBf16Fp8Grouped(o.data(), kGroups * kGroupIn, m, kGroups, w, z.data(), za, pool.get());
    }
    if (part != 0) {
      const Fp8Weight w =
          InKernelLayout({b_codes[layer].as<uint8_t>(), b_scales[layer].as<uint8_t>(), kDim, za});
      ActQuantFp8(z.data(), m, za, 128, z_codes.data(), z_scales.data());
      Fp8Gemm(z_codes.data(), z_scales.data(), m, w, y.data(), pool.get());
    }
    benchmark::DoNotOptimize(y.data());
    layer = (layer + 1) % kAttnOLayers;
  }
  const int64_t bytes = (part != 1 ? za * kGroupIn : 0) + (part != 0 ? kDim * za : 0);  // weights
  state.SetBytesProcessed(state.iterations() * bytes);
}

// {isa, part, threads, m}: AVX-512 and AVX2, one thread and all CPUs, one
// row (a decode step); AVX-512 on all CPUs also at 2 and 4 rows (a K = 1
// verify, batch 4).
void AttnOArgs(benchmark::internal::Benchmark* b) {
  const int64_t all = ThreadPool::DefaultThreads();
  for (int64_t part = 0; part <= 2; ++part) {
    // Part 0 (wo_a) has no FP8 block-scaled GEMM: no FMA-kernel row.
    for (int64_t isa = 1; isa <= (part == 0 ? 2 : kAvx512Fp8Fma); ++isa) {
      b->Args({isa, part, 1, 1});
      if (all > 1) b->Args({isa, part, all, 1});
    }
    for (int64_t m : {2, 4}) b->Args({2, part, all, m});
  }
  b->ArgNames({"isa", "part", "threads", "m"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// The expert GEMVs of one decode step's MoE layer at DeepSeek-V4-Flash shapes,
// one token: 6 routed MXFP4 experts (w1, w3 [2048, 4096], w2 [4096, 2048])
// and the FP8 shared expert (same shapes), each with its clamped SwiGLU and
// re-quantization between gate/up and down, as model/moe.cc runs them.
// Arg `batched`: 0 = one Fp4Gemm / Fp8Gemm call per weight (the per-expert
// loop, 21 dispatches), 1 = two BlockScaledGemmBatch calls (gate/up of
// every expert, then every down).  kMoeLayers layers' weights are cycled so
// every call streams from DRAM (4 layers, 420 MB, in 2 MiB pages as the
// model's).  Bytes: the weights read (codes + scales).
constexpr int64_t kMoeLayers = 4, kMoeExperts = 6, kMoeInter = 2048, kMoeDim = 4096;

struct MoeLayerWeights {
  Buffer packed, scales;      // routed: [expert][w1 | w3 | w2], panel layout
  Buffer codes, fp8_scales;   // shared: [w1 | w3 | w2]
  std::vector<Fp4Weight> w4;  // expert e: 3e (w1), 3e + 1 (w3), 3e + 2 (w2)
  std::vector<Fp8Weight> w8;  // w1, w3, w2
};

// Fast deterministic filler (the weights are ~100 MB per layer).
void FillBytes(Buffer& v, uint64_t seed, uint8_t lo, uint8_t span, bool no_nan) {
  uint64_t z = seed * 0x9e3779b97f4a7c15ull + 1;
  uint8_t* p = v.as<uint8_t>();
  for (size_t i = 0; i < v.size(); ++i) {
    z ^= z << 13;
    z ^= z >> 7;
    z ^= z << 17;
    p[i] = static_cast<uint8_t>(lo + (z >> 32) % span);
    if (no_nan && (p[i] & 0x7f) == 0x7f) p[i] &= 0xfe;
  }
}

MoeLayerWeights MakeMoeLayer(uint64_t seed) {
  MoeLayerWeights l;
  const int64_t one = kMoeInter * kMoeDim;  // elements of one weight
  l.packed = Buffer(kMoeExperts * 3 * one / 2);
  l.scales = Buffer(kMoeExperts * 3 * one / 32);
  l.codes = Buffer(3 * one);
  l.fp8_scales = Buffer(3 * one / (128 * 128));
  FillBytes(l.packed, seed, 0, 255, false);
  FillBytes(l.scales, seed + 1, 118, 9, false);
  FillBytes(l.codes, seed + 2, 0, 255, true);
  FillBytes(l.fp8_scales, seed + 3, 116, 9, false);
  // Random bytes read as the panel layout the model packs its experts into
  // (the shapes are whole panels).
  for (int64_t i = 0; i < 3 * kMoeExperts; ++i) {
    const bool down = i % 3 == 2;
    l.w4.push_back({l.packed.as<uint8_t>() + i * one / 2, l.scales.as<uint8_t>() + i * one / 32,
                    down ? kMoeDim : kMoeInter, down ? kMoeInter : kMoeDim, Fp4Layout::kPanels});
  }
  for (int64_t i = 0; i < 3; ++i) {
    const bool down = i == 2;
    l.w8.push_back(InKernelLayout({l.codes.as<uint8_t>() + i * one,
                                   l.fp8_scales.as<uint8_t>() + i * one / (128 * 128),
                                   down ? kMoeDim : kMoeInter, down ? kMoeInter : kMoeDim}));
  }
  return l;
}

void BM_MoeDecode(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  const bool batched = state.range(1) != 0;
  std::vector<MoeLayerWeights> layers;
  for (int64_t l = 0; l < kMoeLayers; ++l) layers.push_back(MakeMoeLayer(100 + 8 * l));
  constexpr int64_t kBodies = kMoeExperts + 1;  // routed, then shared
  const Activation x = RandomActivation(1, kMoeDim);
  std::vector<bf16> g(kBodies * kMoeInter), u(kBodies * kMoeInter), h(kBodies * kMoeInter);
  std::vector<uint8_t> hq(kBodies * kMoeInter);
  std::vector<float> hs(kBodies * kMoeInter / 128), rw(kMoeExperts, 0.25f);
  std::vector<bf16> y(kBodies * kMoeDim);
  std::vector<BlockScaledGemm> jobs;
  auto pool = MakePool(state.range(2));
  int64_t layer = 0;
  for (auto _ : state) {
    const MoeLayerWeights& l = layers[layer];
    // Body b's weights: routed experts first, the shared expert last.
    auto gemm = [&](int64_t b, int64_t which, const uint8_t* codes, const float* scales,
                    bf16* out) {
      BlockScaledGemm j{codes, scales, 1, nullptr, nullptr, out};
      if (b < kMoeExperts) {
        j.fp4 = &l.w4[3 * b + which];
      } else {
        j.fp8 = &l.w8[which];
      }
      return j;
    };
    jobs.clear();
    for (int64_t b = 0; b < kBodies; ++b) {
      jobs.push_back(gemm(b, 0, x.codes.data(), x.scales.data(), g.data() + b * kMoeInter));
      jobs.push_back(gemm(b, 1, x.codes.data(), x.scales.data(), u.data() + b * kMoeInter));
    }
    if (batched) {
      BlockScaledGemmBatch(jobs.data(), static_cast<int64_t>(jobs.size()), pool.get());
    } else {
      for (const BlockScaledGemm& j : jobs) BlockScaledGemmBatch(&j, 1, pool.get());
    }
    for (int64_t b = 0; b < kBodies; ++b) {
      const int64_t o = b * kMoeInter;
      SwiGlu(g.data() + o, u.data() + o, 1, kMoeInter, 10.0f,
             b < kMoeExperts ? rw.data() + b : nullptr, h.data() + o);
    }
    ActQuantFp8(h.data(), kBodies, kMoeInter, 128, hq.data(), hs.data());
    jobs.clear();
    for (int64_t b = 0; b < kBodies; ++b) {
      jobs.push_back(gemm(b, 2, hq.data() + b * kMoeInter, hs.data() + b * kMoeInter / 128,
                          y.data() + b * kMoeDim));
    }
    if (batched) {
      BlockScaledGemmBatch(jobs.data(), static_cast<int64_t>(jobs.size()), pool.get());
    } else {
      for (const BlockScaledGemm& j : jobs) BlockScaledGemmBatch(&j, 1, pool.get());
    }
    benchmark::DoNotOptimize(y.data());
    layer = (layer + 1) % kMoeLayers;
  }
  const int64_t one = kMoeInter * kMoeDim;
  state.SetBytesProcessed(state.iterations() *
                          (kMoeExperts * 3 * (one / 2 + one / 32) + 3 * (one + one / (128 * 128))));
}

// {isa, batched, threads}: AVX-512 and AVX2, one thread and all CPUs.
void MoeDecodeArgs(benchmark::internal::Benchmark* b) {
  const int64_t all = ThreadPool::DefaultThreads();
  for (int64_t isa = 1; isa <= 2; ++isa) {
    for (int64_t batched = 0; batched <= 1; ++batched) {
      b->Args({isa, batched, 1});
      if (all > 1) b->Args({isa, batched, all});
    }
  }
  b->ArgNames({"isa", "batched", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// An LM head (BF16 weight used as FP32, FP32 logits): the tiny preset's
// (vocab 4096 x hidden 256, cache resident, so compute bound) or the bench
// preset's (vocab 16384 x hidden 4096, 128 MiB: streamed from DRAM).
// `approx`: the draft head's kernel (BF16 dot products).
struct HeadShape {
  int64_t vocab, hidden;
  bool approx;
  Bf16Layout layout = Bf16Layout::kRows;  // kPairs: as the model loads the head
};
constexpr HeadShape kTinyHead{4096, 256, false}, kTinyDraftHead{4096, 256, true};
constexpr HeadShape kBenchHead{16384, 4096, false}, kBenchDraftHead{16384, 4096, true};
constexpr HeadShape kBenchHeadPairs{16384, 4096, false, Bf16Layout::kPairs};

void BM_HeadF32(benchmark::State& state, HeadShape shape) {
  if (!SelectIsa(state)) return;
  const bool approx = shape.approx;
  const int64_t m = state.range(1), n = shape.vocab, k = shape.hidden;
  std::mt19937 rng(6);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  Buffer wbuf(n * k * sizeof(bf16));  // 2 MiB pages from 2 MiB up, as the model's
  bf16* w = wbuf.as<bf16>();
  std::vector<bf16> x(m * k);
  std::vector<float> y(m * n);
  for (int64_t i = 0; i < n * k; ++i) w[i] = F32ToBf16(normal(rng));
  for (auto& v : x) v = F32ToBf16(normal(rng));
  if (shape.layout == Bf16Layout::kPairs) {
    const std::vector<bf16> rows(w, w + n * k);
    PackBf16Pairs(rows.data(), n, k, w);  // n even: the same element count
  }
  auto pool = MakePool(state.range(2));
  for (auto _ : state) {
    if (approx) {
      GemmBf16F32Approx(x.data(), m, k, w, n, y.data(), pool.get(), shape.layout);
    } else {
      GemmBf16F32(x.data(), m, k, w, n, y.data(), pool.get(), shape.layout);
    }
    benchmark::DoNotOptimize(y.data());
  }
  state.SetBytesProcessed(state.iterations() * n * k * 2);
}

// The compressor's projection at decode (GemmBf16F32Pair: wkv and wgate,
// BF16 [width, 4096] each, FP32 outputs), width 1024 (ratio 4, overlapping
// windows) or 512 (ratio 128); enough layers' weights cycled (256 MiB, 8x
// the L3) that they stream from DRAM as in a decode step.
constexpr int64_t kCompressorCycledBytes = int64_t{256} << 20;

void BM_CompressorProject(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  const int64_t width = state.range(1), dim = 4096;
  std::mt19937 rng(9);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  const int64_t layers = kCompressorCycledBytes / (2 * width * dim * 2);
  std::vector<std::vector<bf16>> wkv, wgate;
  for (int64_t l = 0; l < layers; ++l) {
    for (auto* w : {&wkv, &wgate}) {
      w->emplace_back(width * dim);
      for (auto& v : w->back()) v = F32ToBf16(normal(rng));
    }
  }
  std::vector<bf16> x(dim);
  for (auto& v : x) v = F32ToBf16(normal(rng));
  std::vector<float> kv(width), score(width);
  // Arg 3: the weights in the BF16 pair layout the model loads them into.
  const Bf16Layout layout = state.range(3) != 0 ? Bf16Layout::kPairs : Bf16Layout::kRows;
  if (layout == Bf16Layout::kPairs) {
    for (auto* ws : {&wkv, &wgate}) {
      for (auto& w : *ws) {
        std::vector<bf16> rows = w;
        PackBf16Pairs(rows.data(), width, dim, w.data());
      }
    }
  }
  auto pool = MakePool(state.range(2));
  int64_t layer = 0;
  for (auto _ : state) {
    GemmBf16F32Pair(x.data(), 1, dim, wkv[layer].data(), width, kv.data(), wgate[layer].data(),
                    width, score.data(), pool.get(), layout);
    benchmark::DoNotOptimize(kv.data());
    benchmark::DoNotOptimize(score.data());
    layer = (layer + 1) % layers;
  }
  state.SetBytesProcessed(state.iterations() * 2 * width * dim * 2);
}

// {isa, width, threads, pairs}: AVX-512, one thread and all CPUs, rows and
// pairs, real time.
void CompressorArgs(benchmark::internal::Benchmark* b) {
  for (int64_t width : {512, 1024}) {
    for (int64_t threads : {int64_t{1}, int64_t{ThreadPool::DefaultThreads()}}) {
      for (int64_t pairs : {0, 1}) b->Args({2, width, threads, pairs});
    }
  }
  b->ArgNames({"isa", "width", "threads", "pairs"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// Quantization of activations per token: ActQuantFp8 of a 4096-wide hidden
// row, indexer-query FP4 QAT (64 heads x 128) and KV FP8 QAT (512 dims).
// Bare read rate of the FP4 GEMV's two access patterns, one thread, 256 MiB
// from DRAM (docs/performance.md "FP4 panel layout").  Arg 16: a panel of the
// checkpoint's rows (2 KiB each, as [out, 4096] FP4), one 64-byte line of each
// of the 16 rows in turn; arg 1: the same bytes front to back (the panel
// layout).  One word per line is read, so every line is fetched whole.
void BM_ReadPattern(benchmark::State& state) {
  const int64_t streams = state.range(0), row = 2048, bytes = int64_t{256} << 20;
  const std::vector<uint64_t> buf(bytes / 8, 1);
  const uint64_t* p = buf.data();
  for (auto _ : state) {
    uint64_t sum = 0;
    for (int64_t panel = 0; panel < bytes; panel += streams * row) {
      for (int64_t off = 0; off < row; off += 64) {
        for (int64_t c = 0; c < streams; ++c) sum += p[(panel + c * row + off) / 8];
      }
    }
    benchmark::DoNotOptimize(sum);
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// A bare read of 1 GiB in 2 MiB pages (each of the pool's threads sums its
// share of 64-bit words, four chains), to run beside the DRAM-streamed GEMVs
// above (--benchmark_enable_random_interleaving) as the host's bandwidth of
// the moment.  A reference, not a ceiling: plain 64-bit loads, no vector
// width or prefetch tuning (once the bench head GEMV streamed 67.6 GB/s next
// to its 63).
void BM_ReadBandwidth(benchmark::State& state) {
  constexpr int64_t kWords = (int64_t{1} << 30) / 8;
  Buffer buf(kWords * 8);
  uint64_t* words = buf.as<uint64_t>();
  for (int64_t i = 0; i < kWords; ++i) words[i] = static_cast<uint64_t>(i);
  auto pool = MakePool(state.range(0));
  for (auto _ : state) {
    std::atomic<uint64_t> total{0};
    ParallelFor(pool.get(), kWords, kWords / 64, [&](int64_t begin, int64_t end) {
      const uint64_t* w = words + begin;
      const int64_t n = end - begin, whole = n / 4 * 4;
      uint64_t s0 = 0, s1 = 0, s2 = 0, s3 = 0;
      for (int64_t i = 0; i < whole; i += 4) {
        s0 += w[i];
        s1 += w[i + 1];
        s2 += w[i + 2];
        s3 += w[i + 3];
      }
      for (int64_t i = whole; i < n; ++i) s0 += w[i];
      total.fetch_add(s0 ^ s1 ^ s2 ^ s3, std::memory_order_relaxed);
    });
    benchmark::DoNotOptimize(total.load());
  }
  state.SetBytesProcessed(state.iterations() * kWords * 8);
}

// BM_GemvDram's BF16 kind: the head's GEMV (GemmBf16F32, pair layout).
void GemvDramBf16(benchmark::State& state) {
  const int64_t out = state.range(2), in = state.range(3);
  const int64_t bytes = out * in * 2;
  const int64_t copies = std::max<int64_t>(2, (int64_t{512} << 20) / bytes);
  std::mt19937 rng(13);
  std::normal_distribution<float> normal(0.0f, 0.02f);
  std::vector<bf16> rows(out * in);
  for (auto& v : rows) v = F32ToBf16(normal(rng));
  std::vector<Buffer> w;
  for (int64_t c = 0; c < copies; ++c) {
    w.emplace_back(bytes);
    PackBf16Pairs(rows.data(), out, in, w.back().as<bf16>());
  }
  const int64_t m = state.range(5);
  std::vector<bf16> x(m * in);
  for (auto& v : x) v = F32ToBf16(normal(rng));
  std::vector<float> y(m * out);
  auto pool = MakePool(state.range(4));
  int64_t c = 0;
  for (auto _ : state) {
    GemmBf16F32(x.data(), m, in, w[c].as<bf16>(), out, y.data(), pool.get(), Bf16Layout::kPairs);
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
}

// One-row GEMVs streamed from DRAM at the expert and projection shapes of a
// decode step: enough copies of the weight (512 MiB in all, in 2 MiB pages as
// the model's) cycled that no call finds its weight in the L3, which the
// single-weight GEMV benchmarks above partly do.  Args {isa, kind (0: MXFP4
// panels, 1: FP8 in the kernel's layout, 2: BF16 pairs with FP32 outputs, as
// the head), out, in, threads, m}; bytes: codes and scales.  Run it beside
// BM_ReadBandwidth with random interleaving.
void BM_GemvDram(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  if (state.range(1) == 2) return GemvDramBf16(state);
  const bool fp8 = state.range(1) != 0;
  const int64_t out = state.range(2), in = state.range(3);
  const int64_t code_bytes = fp8 ? out * in : Fp4PanelPackedBytes(out, in);
  const int64_t scale_bytes = fp8 ? ((out + 127) / 128) * (in / 128) : Fp4PanelScaleBytes(out, in);
  const int64_t copies = std::max<int64_t>(2, (int64_t{512} << 20) / (code_bytes + scale_bytes));
  std::vector<Buffer> codes, scales;
  const std::vector<uint8_t> row_codes = RandomBytes(fp8 ? 1 : out * in / 2, 0, 255, 11);
  const std::vector<uint8_t> row_scales = RandomBytes(fp8 ? 1 : out * in / 32, 118, 126, 12);
  for (int64_t c = 0; c < copies; ++c) {
    codes.emplace_back(code_bytes);
    scales.emplace_back(scale_bytes);
    if (fp8) {
      FillBytes(codes.back(), 20 + c, 0, 255, true);
      FillBytes(scales.back(), 40 + c, 116, 9, false);
    } else if (c == 0) {
      PackFp4Panels({row_codes.data(), row_scales.data(), out, in}, codes[0].as<uint8_t>(),
                    scales[0].as<uint8_t>());
    } else {  // the packed panels of copy 0, flag byte included
      std::copy_n(codes[0].as<uint8_t>(), code_bytes, codes.back().as<uint8_t>());
      std::copy_n(scales[0].as<uint8_t>(), scale_bytes, scales.back().as<uint8_t>());
    }
  }
  const int64_t m = state.range(5);
  const Activation a = RandomActivation(m, in);
  std::vector<bf16> y(m * out);
  auto pool = MakePool(state.range(4));
  int64_t c = 0;
  for (auto _ : state) {
    if (fp8) {
      const Fp8Weight w =
          InKernelLayout({codes[c].as<uint8_t>(), scales[c].as<uint8_t>(), out, in});
      Fp8Gemm(a.codes.data(), a.scales.data(), m, w, y.data(), pool.get());
    } else {
      const Fp4Weight w{codes[c].as<uint8_t>(), scales[c].as<uint8_t>(), out, in,
                        Fp4Layout::kPanels};
      Fp4Gemm(a.codes.data(), a.scales.data(), m, w, y.data(), pool.get());
    }
    benchmark::DoNotOptimize(y.data());
    c = (c + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * (code_bytes + scale_bytes));
}

// {isa, kind, out, in, threads, m}: the driver's AVX-512 kernels (and the
// exact FP4 kernels, isa 5) on all CPUs: an expert's w1 / w3 and w2, the
// shared expert's, wo_b, the head; m 1 (a decode step), 2 (a K = 1 verify,
// whose rows share each weight byte) and 4 (batch 4, or a K = 3 verify).
void GemvDramArgs(benchmark::internal::Benchmark* b) {
  const int64_t all = ThreadPool::DefaultThreads();
  for (int64_t m : {1, 2, 4}) {
    for (int64_t isa : {2, 5}) {
      b->Args({isa, 0, 2048, 4096, all, m});
      b->Args({isa, 0, 4096, 2048, all, m});
    }
    b->Args({2, 1, 2048, 4096, all, m});
    b->Args({2, 1, 4096, 2048, all, m});
    b->Args({2, 1, 4096, 8192, all, m});
    b->Args({2, 2, 16384, 4096, all, m});  // the bench head
    b->Args({2, 2, 2048, 4096, all, m});
  }
  b->ArgNames({"isa", "kind", "out", "in", "threads", "m"})
      ->Unit(benchmark::kMicrosecond)
      ->UseRealTime();
}

void BM_Quant(benchmark::State& state) {
  if (!SelectIsa(state)) return;
  const int64_t rows = state.range(1);
  std::mt19937 rng(8);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<bf16> x(rows * 8192);
  for (auto& v : x) v = F32ToBf16(normal(rng));
  std::vector<uint8_t> codes(rows * 4096);
  std::vector<float> scales(rows * 32);
  std::vector<bf16> work = x;
  for (auto _ : state) {
    ActQuantFp8(x.data(), rows, 4096, 128, codes.data(), scales.data());
    std::copy(x.begin(), x.end(), work.begin());
    Fp4Qat(work.data(), rows * 64, 128);
    KvQatFp8(work.data(), rows, 512, 448);
    benchmark::DoNotOptimize(work.data());
  }
  state.SetItemsProcessed(state.iterations() * rows);
}

// {isa, M, threads}: GEMV on one thread and on all CPUs, plus prefill sizes.
void GemvArgs(benchmark::internal::Benchmark* b) {
  const int64_t all = ThreadPool::DefaultThreads();
  for (int64_t isa = 0; isa <= 2; ++isa) b->Args({isa, 1, 1});
  if (all > 1) {
    for (int64_t isa = 1; isa <= 2; ++isa) b->Args({isa, 1, all});
  }
  // Wall time: the pool's workers are not on the calling thread's CPU clock.
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

// Speculative verification at batch 1: M = 1 (plain decode) against
// M = 2..4 (the tail row plus 1..3 drafts), one thread, CPU time.
void VerifyArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 3, 4}) b->Args({2, m, 1});
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMicrosecond);
}

// The head: verify sizes plus a batch-16 decode step.
void HeadArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 3, 4, 16}) b->Args({2, m, 1});
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMicrosecond);
}

// One row and a verify step's two, on 1 and 2 threads, real time (the bench
// head streams from DRAM).
void HeadGemvArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2}) {
    for (int64_t threads : {1, 2}) b->Args({2, m, threads});
  }
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMicrosecond)->UseRealTime();
}

void PrefillArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {16, 128}) {
    for (int64_t isa = 1; isa <= 2; ++isa) b->Args({isa, m, 1});
  }
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

// The FP8 benchmarks: AVX-512 with the FMA kernel next to the BF16 dot one
// (kAvx512Fp8Fma), so the two are compared in one run.
void Fp8GemvArgs(benchmark::internal::Benchmark* b) {
  GemvArgs(b);
  b->Args({kAvx512Fp8Fma, 1, 1});
  const int64_t all = ThreadPool::DefaultThreads();
  if (all > 1) b->Args({kAvx512Fp8Fma, 1, all});
}
void Fp8VerifyArgs(benchmark::internal::Benchmark* b) {
  VerifyArgs(b);
  for (int64_t m : {1, 2, 3, 4}) b->Args({kAvx512Fp8Fma, m, 1});
}
// FP4 GEMVs: the kernel the driver picks next to the exact ones.
void Fp4GemvArgs(benchmark::internal::Benchmark* b) {
  GemvArgs(b);
  b->Args({kAvx512Fp4Exact, 1, 1});
  const int64_t all = ThreadPool::DefaultThreads();
  if (all > 1) b->Args({kAvx512Fp4Exact, 1, all});
}

// FP4 verify rows: the kernel the driver picks next to the exact and the
// row kernels.
void Fp4VerifyArgs(benchmark::internal::Benchmark* b) {
  VerifyArgs(b);
  for (int64_t m : {2, 3, 4}) {
    b->Args({kAvx512Fp4Exact, m, 1});
    b->Args({kAvx512Fp4Rows, m, 1});
  }
  for (int64_t m : {8, 16}) {
    b->Args({2, m, 1});
    b->Args({kAvx512Fp4Exact, m, 1});
    b->Args({kAvx512Fp4Rows, m, 1});
  }
}

// FP4 prefill: the driver's kernel (isa 2: BF16 dot products where the CPU
// has them) next to the exact kernels (outer products from the threshold
// up) and the row kernels alone, plus AVX2.
void Fp4PrefillArgs(benchmark::internal::Benchmark* b) {
  for (int64_t m : {4, 8, 16, 32, 128}) {
    for (int64_t isa : {int64_t{1}, int64_t{2}, kAvx512Fp4Exact, kAvx512Fp4Rows}) {
      b->Args({isa, m, 1});
    }
  }
  // On every thread, where the driver's tasks hold a few panels each.
  const int64_t all = ThreadPool::DefaultThreads();
  if (all > 1) {
    for (int64_t isa : {int64_t{2}, kAvx512Fp4Exact}) b->Args({isa, 128, all});
  }
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

void Fp8PrefillArgs(benchmark::internal::Benchmark* b) {
  PrefillArgs(b);
  for (int64_t m : {16, 128}) b->Args({kAvx512Fp8Fma, m, 1});
}

BENCHMARK_CAPTURE(BM_Fp8Gemm, Gemv_wq_b, kWqB)->Apply(Fp8GemvArgs);
BENCHMARK_CAPTURE(BM_Fp8Gemm, Gemv_shared_w1, kSharedW1)->Apply(Fp8GemvArgs);
BENCHMARK_CAPTURE(BM_Fp4Gemm, Gemv_expert_w1, kExpertW1)->Apply(Fp4GemvArgs);
BENCHMARK_CAPTURE(BM_Fp4Gemm, Gemv_8_experts_w1, kEightExpertsW1)->Apply(Fp4GemvArgs);
BENCHMARK(BM_GemmBf16)->Name("BM_GemmBf16/Gemv_wo_a")->Apply(GemvArgs);
BENCHMARK(BM_AttnODecode)->Name("BM_AttnO/Decode")->Apply(AttnOArgs);
BENCHMARK(BM_CompressorProject)->Name("BM_Compressor/Decode")->Apply(CompressorArgs);
BENCHMARK(BM_MoeDecode)->Name("BM_Moe/Decode")->Apply(MoeDecodeArgs);
BENCHMARK_CAPTURE(BM_Fp8Gemm, Verify_shared_w1, kSharedW1)->Apply(Fp8VerifyArgs);
BENCHMARK_CAPTURE(BM_Fp4Gemm, Verify_expert_w1, kExpertW1)->Apply(Fp4VerifyArgs);
BENCHMARK_CAPTURE(BM_Fp4Gemm, Verify_8_experts_w1, kEightExpertsW1)->Apply(Fp4VerifyArgs);
BENCHMARK(BM_GemmBf16)->Name("BM_GemmBf16/Verify_wo_a")->Apply(VerifyArgs);
BENCHMARK_CAPTURE(BM_HeadF32, Verify_tiny_head, kTinyHead)->Apply(HeadArgs);
// The MTP draft head (GemmBf16F32Approx: AVX512-BF16 dot products).
BENCHMARK_CAPTURE(BM_HeadF32, Draft_tiny_head, kTinyDraftHead)->Apply(HeadArgs);
BENCHMARK_CAPTURE(BM_HeadF32, Gemv_bench_head, kBenchHead)->Apply(HeadGemvArgs);
BENCHMARK_CAPTURE(BM_HeadF32, Gemv_bench_head_pairs, kBenchHeadPairs)->Apply(HeadGemvArgs);
BENCHMARK_CAPTURE(BM_HeadF32, Gemv_bench_draft_head, kBenchDraftHead)->Apply(HeadGemvArgs);
BENCHMARK(BM_ReadPattern)->Arg(16)->Arg(1)->UseRealTime()->Unit(benchmark::kMillisecond);
BENCHMARK(BM_GemvDram)->Name("BM_Gemv/Dram")->Apply(GemvDramArgs);
BENCHMARK(BM_ReadBandwidth)
    ->Apply([](benchmark::internal::Benchmark* b) {
      b->Arg(1);
      if (ThreadPool::DefaultThreads() > 1) b->Arg(ThreadPool::DefaultThreads());
    })
    ->ArgName("threads")
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Quant)
    ->Name("BM_Quant/act4096_fp4qat8192_kvqat512")
    ->ArgsProduct({{0, 1, 2}, {16}})
    ->ArgNames({"isa", "tokens"})
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_CAPTURE(BM_Fp8Gemm, Prefill_shared_w1, kSharedW1)->Apply(Fp8PrefillArgs);
// wq_b at a 1k prefill: K = 1024, 8 blocks per panel (a task's first blocks
// weigh more than at K = 4096), 32 MiB of weights per 64-row block.
BENCHMARK_CAPTURE(BM_Fp8Gemm, Prefill_wq_b, kWqB)->Apply([](benchmark::internal::Benchmark* b) {
  b->Args({2, 1024, ThreadPool::DefaultThreads()})->Args({2, 128, 1});
  b->ArgNames({"isa", "m", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
});
BENCHMARK_CAPTURE(BM_Fp4Gemm, Prefill_expert_w1, kExpertW1)->Apply(Fp4PrefillArgs);
BENCHMARK(BM_GemmBf16)->Name("BM_GemmBf16/Prefill_wo_a")->Apply(PrefillArgs);

}  // namespace
}  // namespace dsv4::kernels

BENCHMARK_MAIN();
