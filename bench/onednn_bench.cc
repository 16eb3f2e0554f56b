// dsv4's prefill GEMMs side by side with oneDNN (Debian libdnnl-dev) on the
// same shapes, same threads, same process: W8A8 INT8 (dsv4 Int8Gemm: INT8
// codes, exact INT32 sums, per-token x per-channel scales, BF16 out; oneDNN
// matmul s8 x s8 -> s32) and BF16 (dsv4 GemmBf16: FP32 FMA chain, BF16 out;
// oneDNN matmul bf16 x bf16 -> bf16, which may use AVX512-BF16 dot products,
// i.e. different rounding), next to dsv4's FP8 Fp8Gemm (engine 2: BF16 dot
// products where the CPU has them).  oneDNN gets its best case: weights reordered
// once, outside the timing, into the layout its kernel prefers
// (format_tag::any); so does dsv4 where the model does (W8A8 panels on
// AVX-512 VNNI, FP8 panels for the BF16 dot kernel), and engine 2 of the INT8
// benchmark passes the checkpoint's [out, in] rows (packed per task).
//
//   OMP_NUM_THREADS=T dsv4_onednn_bench   (T = the threads argument)
//
// M = 2-8: decode-sized batches; 16-1024: prefill rows, or a routed expert's
// share of them.
//
// Arguments: {engine (0 dsv4, 1 oneDNN, 2 dsv4 FP8 / INT8 rows), M, threads}.  Figures: GFLOP/s.
#include <benchmark/benchmark.h>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/int8_gemm.h"
#include "kernels/quant.h"
#include "tensor/tensor.h"

namespace dsv4::kernels {
namespace {

constexpr int64_t kN = 2048, kK = 4096;  // a routed expert's w1 / w3 (Flash)

std::vector<int8_t> RandomInt8(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> v(-127, 127);
  std::vector<int8_t> out(static_cast<size_t>(n));
  for (auto& x : out) x = static_cast<int8_t>(v(rng));
  return out;
}

std::vector<bf16> RandomBf16(int64_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> g(0.0f, 1.0f);
  std::vector<bf16> out(static_cast<size_t>(n));
  for (auto& x : out) x = F32ToBf16(g(rng));
  return out;
}

std::unique_ptr<ThreadPool> MakePool(int64_t threads) {
  return threads > 1 ? std::make_unique<ThreadPool>(static_cast<int>(threads)) : nullptr;
}

void SetFlops(benchmark::State& state, int64_t m) {
  state.counters["GFLOP/s"] = benchmark::Counter(
      2.0 * static_cast<double>(m * kN * kK) * static_cast<double>(state.iterations()) * 1e-9,
      benchmark::Counter::kIsRate);
}

// One oneDNN matmul x [m, K] . w^T with w [N, K] given in the checkpoint
// layout, its weights reordered once into the kernel's preferred layout.
struct OneDnnMatmul {
  dnnl::engine eng{dnnl::engine::kind::cpu, 0};
  dnnl::stream stream{eng};
  dnnl::matmul prim;
  dnnl::memory src, weights, dst;

  OneDnnMatmul(int64_t m, dnnl::memory::data_type in, dnnl::memory::data_type out, void* x,
               void* w_plain, void* y) {
    using md = dnnl::memory::desc;
    using tag = dnnl::memory::format_tag;
    const md x_md({m, kK}, in, tag::ab);
    const md w_plain_md({kK, kN}, in, tag::ba);  // [N, K] row-major
    const md w_any({kK, kN}, in, tag::any);
    const md y_md({m, kN}, out, tag::ab);
    const dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(x_md, w_any, y_md), eng);
    prim = dnnl::matmul(pd);
    src = dnnl::memory(x_md, eng, x);
    dst = dnnl::memory(y_md, eng, y);
    dnnl::memory plain(w_plain_md, eng, w_plain);
    weights = dnnl::memory(pd.weights_desc(), eng);
    dnnl::reorder(plain, weights).execute(stream, plain, weights);
    stream.wait();
  }
  void Run() {
    prim.execute(stream, {{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, weights}, {DNNL_ARG_DST, dst}});
    stream.wait();
  }
};

void BM_Int8(benchmark::State& state) {
  const bool onednn = state.range(0) == 1;
  const int64_t m = state.range(1);
  std::vector<int8_t> x = RandomInt8(m * kK, 1), w = RandomInt8(kN * kK, 2);
  if (onednn) {
    std::vector<int32_t> y(static_cast<size_t>(m * kN));
    OneDnnMatmul mm(m, dnnl::memory::data_type::s8, dnnl::memory::data_type::s32, x.data(),
                    w.data(), y.data());
    for (auto _ : state) mm.Run();
  } else {
    std::vector<float> xs(static_cast<size_t>(m), 0.01f), ws(kN, 0.02f);
    std::vector<bf16> y(static_cast<size_t>(m * kN));
    const Int8Weight rows{w.data(), ws.data(), kN, kK};
    // Engine 0 in the layout the model packs its W8A8 weights into.
    Buffer panels(static_cast<size_t>(Int8PanelBytes(kN, kK)));
    const bool packed = state.range(0) == 0 && Int8GemmUsesPanels();
    const Int8Weight wt = packed ? PackInt8Panels(rows, panels.as<int8_t>()) : rows;
    auto pool = MakePool(state.range(2));
    for (auto _ : state) {
      Int8Gemm(x.data(), xs.data(), m, wt, y.data(), pool.get());
      benchmark::DoNotOptimize(y.data());
    }
  }
  SetFlops(state, m);
  state.SetLabel(onednn                ? "oneDNN s8s8s32"
                 : state.range(0) == 2 ? "dsv4 Int8Gemm (rows)"
                                       : "dsv4 Int8Gemm");
}

// dsv4's FP8 GEMM on the same shape (engine 2): e4m3 weights with E8M0
// block scales, activations quantized once outside the timing.  On CPUs with
// AVX512-BF16 and VBMI it runs BF16 dot products, oneDNN's instruction mix.
void RunFp8(benchmark::State& state, const std::vector<bf16>& x, int64_t m, bf16* y) {
  std::mt19937 rng(5);
  std::uniform_int_distribution<int> byte(0, 255), scale(116, 124);
  std::vector<uint8_t> codes(static_cast<size_t>(kN * kK)), scales((kN / 128) * (kK / 128));
  for (auto& c : codes) c = static_cast<uint8_t>((byte(rng) & 0x7f) == 0x7f ? 0 : byte(rng));
  for (auto& c : scales) c = static_cast<uint8_t>(scale(rng));
  std::vector<uint8_t> x_codes(static_cast<size_t>(m * kK));
  std::vector<float> x_scales(static_cast<size_t>(m * kK / 128));
  ActQuantFp8(x.data(), m, kK, 128, x_codes.data(), x_scales.data());
  // In the layout the model packs its FP8 weights into for this CPU's kernel,
  // in 2 MiB pages as its WeightStore holds them (a std::vector's 4 KiB pages
  // made the tiles' weight loads miss the TLB: docs/performance.md "FP8 tiles:
  // activation scales folded in").
  Buffer panels(static_cast<size_t>(Fp8PanelBytes(kN, kK)));
  const Fp8Weight rows{codes.data(), scales.data(), kN, kK};
  const Fp8Weight w =
      Fp8GemmUsesBf16Dots() ? PackFp8Panels(rows, static_cast<uint8_t*>(panels.data())) : rows;
  auto pool = MakePool(state.range(2));
  Fp8Gemm(x_codes.data(), x_scales.data(), m, w, y, pool.get());  // scratch grown untimed
  for (auto _ : state) {
    Fp8Gemm(x_codes.data(), x_scales.data(), m, w, y, pool.get());
    benchmark::DoNotOptimize(y);
  }
}

void BM_Bf16(benchmark::State& state) {
  const bool onednn = state.range(0) == 1;
  const int64_t m = state.range(1);
  std::vector<bf16> x = RandomBf16(m * kK, 3), w = RandomBf16(kN * kK, 4);
  std::vector<bf16> y(static_cast<size_t>(m * kN));
  if (state.range(0) == 2) {
    RunFp8(state, x, m, y.data());
    SetFlops(state, m);
    state.SetLabel(Fp8GemmUsesBf16Dots() ? "dsv4 Fp8Gemm (bf16 dots)" : "dsv4 Fp8Gemm (fma)");
    return;
  }
  if (onednn) {
    OneDnnMatmul mm(m, dnnl::memory::data_type::bf16, dnnl::memory::data_type::bf16, x.data(),
                    w.data(), y.data());
    for (auto _ : state) mm.Run();
  } else {
    auto pool = MakePool(state.range(2));
    for (auto _ : state) {
      GemmBf16(x.data(), kK, m, kK, w.data(), kN, y.data(), kN, pool.get());
      benchmark::DoNotOptimize(y.data());
    }
  }
  SetFlops(state, m);
  state.SetLabel(onednn ? "oneDNN bf16" : "dsv4 GemmBf16");
}

// {engine, M, threads}: the engines next to each other for each M (BF16:
// also dsv4's FP8 GEMM, engine 2), on one thread, and the prefill sizes on
// two.  oneDNN's threads come from OMP_NUM_THREADS, not the argument: run
// each thread count on its own (--benchmark_filter=threads:T with
// OMP_NUM_THREADS=T).
template <int kEngines>
void Args(benchmark::internal::Benchmark* b) {
  for (int64_t m : {1, 2, 4, 8, 16, 32, 128, 1024}) {
    for (int64_t engine = 0; engine < kEngines; ++engine) b->Args({engine, m, 1});
  }
  for (int64_t m : {128, 1024}) {
    for (int64_t engine = 0; engine < kEngines; ++engine) b->Args({engine, m, 2});
  }
  b->ArgNames({"engine", "m", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Int8)->Apply(Args<3>);
BENCHMARK(BM_Bf16)->Apply(Args<3>);

}  // namespace
}  // namespace dsv4::kernels

BENCHMARK_MAIN();
