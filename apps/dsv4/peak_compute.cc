#include "peak_compute.h"

#include <algorithm>
#include <chrono>

namespace dsv4 {
namespace {

double Seconds(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

// One pass: every thread of the pool runs the loop once; GFLOP/s of all of
// them together over the wall time of the dispatch.
double Pass(kernels::PeakMix mix, int64_t iterations, ThreadPool* pool, std::vector<double>& sink) {
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  const auto t0 = std::chrono::steady_clock::now();
  ParallelFor(pool, threads, 1, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      sink[static_cast<size_t>(t)] = kernels::RunPeakLoop(mix, iterations);
    }
  });
  const double sec = Seconds(t0);
  const double flops =
      2.0 * static_cast<double>(kernels::PeakLoopMultiplyAdds(mix, iterations)) * threads;
  return flops / sec / 1e9;
}

}  // namespace

std::vector<PeakRate> MeasurePeakCompute(ThreadPool* pool, int passes, double pass_seconds) {
  const int threads = pool != nullptr ? pool->num_threads() : 1;
  std::vector<double> sink(static_cast<size_t>(threads));  // keeps every loop's result alive
  std::vector<PeakRate> out;
  for (int m = 0; m < kernels::kNumPeakMixes; ++m) {
    PeakRate r;
    r.mix = static_cast<kernels::PeakMix>(m);
    r.instruction = std::string(kernels::PeakMixInstruction(r.mix));
    r.threads = threads;
    if (!r.instruction.empty() && passes > 0) {
      // Size the passes from a short single-thread run.
      constexpr int64_t kProbe = 20000;
      const auto t0 = std::chrono::steady_clock::now();
      sink[0] = kernels::RunPeakLoop(r.mix, kProbe);
      const double probe = std::max(Seconds(t0), 1e-6);
      const auto iterations =
          std::max<int64_t>(kProbe, static_cast<int64_t>(pass_seconds / probe * kProbe));
      std::vector<double> gflops;
      for (int p = 0; p <= passes; ++p) gflops.push_back(Pass(r.mix, iterations, pool, sink));
      gflops.erase(gflops.begin());  // warm-up (clocks, thread wake-up)
      std::sort(gflops.begin(), gflops.end());
      const size_t n = gflops.size();
      r.best_gflops = gflops.back();
      r.median_gflops = n % 2 == 1 ? gflops[n / 2] : 0.5 * (gflops[n / 2 - 1] + gflops[n / 2]);
    }
    out.push_back(r);
  }
  return out;
}

const PeakRate* FindPeak(const std::vector<PeakRate>& rates, kernels::PeakMix mix) {
  for (const PeakRate& r : rates) {
    if (r.mix == mix && r.median_gflops > 0) return &r;
  }
  return nullptr;
}

}  // namespace dsv4
