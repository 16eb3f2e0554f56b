#include "membw.h"

#include <algorithm>
#include <chrono>

#include "base/logging.h"

namespace dsv4 {

Triad::Triad(size_t array_bytes, ThreadPool* pool)
    : bytes_(array_bytes), pool_(pool), a_(array_bytes), b_(array_bytes), c_(array_bytes) {
  const int64_t n = static_cast<int64_t>(bytes_ / sizeof(double));
  double* pa = a_.as<double>();
  double* pb = b_.as<double>();
  double* pc = c_.as<double>();
  // First touch from the threads that will use the pages (NUMA placement).
  ParallelFor(pool_, n, 1 << 16, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) {
      pa[i] = 0;
      pb[i] = 1.0;
      pc[i] = 2.0;
    }
  });
}

double Triad::Pass() {
  const int64_t n = static_cast<int64_t>(bytes_ / sizeof(double));
  double* pa = a_.as<double>();
  const double* pb = b_.as<double>();
  const double* pc = c_.as<double>();
  const double scalar = 3.0;
  const auto t0 = std::chrono::steady_clock::now();
  ParallelFor(pool_, n, 1 << 16, [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) pa[i] = pb[i] + scalar * pc[i];
  });
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 3.0 * static_cast<double>(bytes_) / sec / 1e9;
}

double Triad::ReadPass() {
  const int64_t n = static_cast<int64_t>(bytes_ / sizeof(uint64_t));
  const uint64_t* pb = b_.as<uint64_t>();
  const uint64_t* pc = c_.as<uint64_t>();
  const auto t0 = std::chrono::steady_clock::now();
  ParallelFor(pool_, n, 1 << 16, [&](int64_t s, int64_t e) {
    uint64_t sb = 0, sc = 0;
    for (int64_t i = s; i < e; ++i) {
      sb += pb[i];
      sc += pc[i];
    }
    read_sum_.fetch_add(sb ^ sc, std::memory_order_relaxed);
  });
  const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return 2.0 * static_cast<double>(bytes_) / sec / 1e9;
}

namespace {

// The median of sorted, non-empty values (the mean of the middle two when
// their count is even).
double SortedMedian(const std::vector<double>& v) {
  const size_t n = v.size();
  return n % 2 == 1 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

}  // namespace

TriadResult SummarizeTriad(std::vector<double> gbps, size_t array_bytes, int threads) {
  TriadResult res;
  res.array_bytes = array_bytes;
  res.threads = threads;
  if (gbps.empty()) return res;
  std::sort(gbps.begin(), gbps.end());
  res.best_gbps = gbps.back();
  res.median_gbps = SortedMedian(gbps);
  return res;
}

PairedRatios PairWindowsWithPasses(const std::vector<double>& window_gbps,
                                   const std::vector<double>& passes) {
  DSV4_CHECK(passes.size() == window_gbps.size() + 1);
  std::vector<double> ratios;
  for (size_t w = 0; w < window_gbps.size(); ++w) {
    ratios.push_back(window_gbps[w] / (0.5 * (passes[w] + passes[w + 1])));
  }
  PairedRatios res;
  res.windows = ratios.size();
  if (ratios.empty()) return res;
  std::sort(ratios.begin(), ratios.end());
  const size_t n = ratios.size();
  res.median = SortedMedian(ratios);
  res.q1 = ratios[(n + 3) / 4 - 1];  // nearest rank: the ceil(p·n)-th smallest
  res.q3 = ratios[(3 * n + 3) / 4 - 1];
  return res;
}

TriadResult MeasureTriad(size_t array_bytes, int reps, ThreadPool* pool) {
  Triad triad(array_bytes, pool);
  (void)triad.Pass();  // warm-up
  std::vector<double> gbps;
  for (int r = 0; r < reps; ++r) gbps.push_back(triad.Pass());
  return SummarizeTriad(std::move(gbps), array_bytes, pool ? pool->num_threads() : 1);
}

}  // namespace dsv4
