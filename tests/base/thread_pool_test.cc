#include "base/thread_pool.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <thread>
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

TEST(ThreadPool, BothEndsCoverRangeExactlyOnce) {
  for (int threads : {1, 2, 3, 4}) {
    ThreadPool pool(threads);
    // 200,003 items in chunks of 1 take more than 2^16 - 1 units: claims in
    // whole units of 4 items, the last one short.
    for (int64_t n : {1, 2, 5, 17, 100, 1000, 200003}) {
      for (int64_t chunk : {1, 3, 64}) {
        std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
        std::atomic<bool> bad_range{false};
        const int64_t chunks = (n + chunk - 1) / chunk;
        const int64_t unit = chunk * ((chunks + 0xfffe) / 0xffff);
        for (int rep = 0; rep < 5; ++rep) {
          pool.ParallelForDynamicBothEnds(n, chunk, [&](int64_t b, int64_t e) {
            if (b < 0 || e > n || b >= e) bad_range = true;
            // Whole units, starting on one; only the range's last may be short.
            if (threads > 1 && (b % unit != 0 || (e % unit != 0 && e != n))) bad_range = true;
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
          pool.ParallelForDynamic(n, chunk, [&](int64_t b, int64_t e) {
            for (int64_t i = b; i < e; ++i) hits[static_cast<size_t>(i)]++;
          });
        }
        EXPECT_FALSE(bad_range.load());
        for (auto& h : hits) {
          ASSERT_EQ(h.load(), 10) << "threads=" << threads << " n=" << n << " chunk=" << chunk;
        }
      }
    }
  }
}

// With two threads each claims from its own end only: the caller's first
// range starts at item 0 and the worker's first range ends at the last
// item, whenever each claims anything (the worker may wake after the caller
// has taken everything).
TEST(ThreadPool, BothEndsEachThreadStartsAtItsEnd) {
  ThreadPool pool(2);
  const int64_t n = 64;
  const std::thread::id caller = std::this_thread::get_id();
  int worker_ran = 0;
  for (int rep = 0; rep < 200; ++rep) {
    int64_t caller_first = -1, worker_first_end = -1;  // each written by one thread
    pool.ParallelForDynamicBothEnds(n, 1, [&](int64_t b, int64_t e) {
      if (std::this_thread::get_id() == caller) {
        if (caller_first < 0) caller_first = b;
      } else if (worker_first_end < 0) {
        worker_first_end = e;
      }
      // Long enough for the worker to wake and claim.
      const auto until = std::chrono::steady_clock::now() + std::chrono::microseconds(20);
      while (std::chrono::steady_clock::now() < until) {
      }
    });
    if (caller_first >= 0) {
      EXPECT_EQ(caller_first, 0);
    }
    if (worker_first_end >= 0) {
      EXPECT_EQ(worker_first_end, n);
      ++worker_ran;
    }
  }
  EXPECT_GT(worker_ran, 0);
}

}  // namespace
}  // namespace dsv4
