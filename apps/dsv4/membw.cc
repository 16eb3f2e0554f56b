#include "membw.h"

#include <algorithm>
#include <chrono>
#include <vector>

#include "tensor/tensor.h"

namespace dsv4 {

TriadResult MeasureTriad(size_t array_bytes, int reps, ThreadPool* pool) {
  const int64_t n = static_cast<int64_t>(array_bytes / sizeof(double));
  Buffer a(array_bytes), b(array_bytes), c(array_bytes);
  double* pa = a.as<double>();
  double* pb = b.as<double>();
  double* pc = c.as<double>();
  // First touch from the threads that will use the pages (NUMA placement).
  ParallelFor(pool, n, 1 << 16, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      pa[i] = 0;
      pb[i] = 1.0;
      pc[i] = 2.0;
    }
  });
  const double scalar = 3.0;
  std::vector<double> gbps;
  for (int r = 0; r <= reps; ++r) {
    const auto t0 = std::chrono::steady_clock::now();
    ParallelFor(pool, n, 1 << 16, [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + scalar * pc[i];
    });
    const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (r > 0) gbps.push_back(3.0 * static_cast<double>(array_bytes) / sec / 1e9);
  }
  std::sort(gbps.begin(), gbps.end());
  TriadResult res;
  res.best_gbps = gbps.back();
  res.median_gbps = gbps[gbps.size() / 2];
  res.array_bytes = array_bytes;
  res.threads = pool ? pool->num_threads() : 1;
  return res;
}

}  // namespace dsv4
