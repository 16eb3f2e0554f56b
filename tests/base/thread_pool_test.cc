#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <vector>

namespace dsv4 {
namespace {

TEST(ThreadPool, CoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 5}) {
    ThreadPool pool(threads);
    for (int64_t n : {0, 1, 7, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      for (int rep = 0; rep < 3; ++rep) {
        pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
          for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
        });
      }
      for (auto& h : hits) EXPECT_EQ(h.load(), 3) << "threads=" << threads << " n=" << n;
    }
  }
}

TEST(ThreadPool, SplitIsStatic) {
  ThreadPool pool(3);
  std::vector<std::pair<int64_t, int64_t>> a, b;
  std::mutex mu;
  auto record = [&](std::vector<std::pair<int64_t, int64_t>>* v) {
    return [&, v](int64_t s, int64_t e) {
      std::lock_guard<std::mutex> lock(mu);
      v->emplace_back(s, e);
    };
  };
  pool.ParallelFor(100, 1, record(&a));
  pool.ParallelFor(100, 1, record(&b));
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  EXPECT_EQ(a, b);
  EXPECT_EQ(a.size(), 3u);
}

// Dynamic jobs interleaved with static ones: every item exactly once, every
// chunk within [0, n) and (with workers) no longer than the guided size, and a static job right
// after a dynamic one still gets each worker's share (workers that missed the dynamic job must not
// confuse the two).
TEST(ThreadPool, DynamicCoversRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    for (int64_t n : {1, 2, 5, 17, 100, 1000}) {
      for (int64_t chunk : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> bad_range{false};
        for (int rep = 0; rep < 5; ++rep) {
          pool.ParallelForDynamic(n, chunk, [&](int64_t b, int64_t e) {
            if (b < 0 || e > n || b >= e) bad_range = true;
            // Guided claims: whole multiples of chunk (the last one what is
            // left), starting on one, at most a chunk over the guided share.
            const int64_t share = std::max(chunk, (n - b) / (2 * threads));
            if (threads > 1 && (b % chunk != 0 || e - b > (share + chunk - 1) / chunk * chunk)) {
              bad_range = true;
            }
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
          pool.ParallelFor(n, 1, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
        }
        EXPECT_FALSE(bad_range.load());
        for (auto& h : hits) {
          EXPECT_EQ(h.load(), 10) << "threads=" << threads << " n=" << n << " chunk=" << chunk;
        }
      }
    }
  }
}

}  // namespace
}  // namespace dsv4
