// dsv4's prefill GEMMs side by side with oneDNN (Debian libdnnl-dev) on the
// same shapes, same threads, same process: W8A8 INT8 (dsv4 Int8Gemm: INT8
// codes, exact INT32 sums, per-token x per-channel scales, BF16 out; oneDNN
// matmul s8 x s8 -> s32) and BF16 (dsv4 GemmBf16: FP32 FMA chain, BF16 out;
// oneDNN matmul bf16 x bf16 -> bf16, which may use AVX512-BF16 dot products,
// i.e. different rounding).  oneDNN gets its best case: weights reordered
// once, outside the timing, into the layout its kernel prefers
// (format_tag::any); dsv4 reads the checkpoint's [out, in] layout.
//
//   OMP_NUM_THREADS=T dsv4_onednn_bench   (T = the threads argument)
//
// M = 2-8: decode-sized batches; 16-1024: prefill rows, or a routed expert's
// share of them.
//
// Arguments: {engine (0 dsv4, 1 oneDNN), M, threads}.  Figures: GFLOP/s.
#include <benchmark/benchmark.h>

#include <memory>
#include <oneapi/dnnl/dnnl.hpp>
#include <random>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/gemm.h"
#include "kernels/int8_gemm.h"

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
    const Int8Weight wt{w.data(), ws.data(), kN, kK};
    auto pool = MakePool(state.range(2));
    for (auto _ : state) {
      Int8Gemm(x.data(), xs.data(), m, wt, y.data(), pool.get());
      benchmark::DoNotOptimize(y.data());
    }
  }
  SetFlops(state, m);
  state.SetLabel(onednn ? "oneDNN s8s8s32" : "dsv4 Int8Gemm");
}

void BM_Bf16(benchmark::State& state) {
  const bool onednn = state.range(0) == 1;
  const int64_t m = state.range(1);
  std::vector<bf16> x = RandomBf16(m * kK, 3), w = RandomBf16(kN * kK, 4);
  std::vector<bf16> y(static_cast<size_t>(m * kN));
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

// {engine, M, threads}: the two engines next to each other for each M.
void Args(benchmark::internal::Benchmark* b) {
  for (int64_t m : {2, 4, 8, 16, 32, 128, 1024}) {
    for (int64_t engine : {0, 1}) b->Args({engine, m, 1});
  }
  b->ArgNames({"engine", "m", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

BENCHMARK(BM_Int8)->Apply(Args);
BENCHMARK(BM_Bf16)->Apply(Args);

}  // namespace
}  // namespace dsv4::kernels

BENCHMARK_MAIN();
