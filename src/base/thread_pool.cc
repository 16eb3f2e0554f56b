#include "base/thread_pool.h"

#include <immintrin.h>
#include <sched.h>

#include <algorithm>

namespace dsv4 {

ThreadPool::ThreadPool(int num_threads) : num_threads_(std::max(1, num_threads)) {
  for (int i = 1; i < num_threads_; ++i) {
    workers_.emplace_back([this, i] { WorkerLoop(i); });
  }
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stop_ = true;
    generation_.fetch_add(1);
  }
  wake_.notify_all();
  for (auto& t : workers_) t.join();
}

int ThreadPool::DefaultThreads() {
  cpu_set_t set;
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::RunShare(int index) {
  if (index >= job_parts_) return;
  // Part p covers [n*p/parts, n*(p+1)/parts): fixed for given n and parts.
  const int64_t begin = job_n_ * index / job_parts_;
  const int64_t end = job_n_ * (index + 1) / job_parts_;
  if (begin < end) (*job_)(begin, end);
}

void ThreadPool::ParallelFor(int64_t n, int64_t min_grain, const RangeFn& fn) {
  if (n <= 0) return;
  const int64_t grain = std::max<int64_t>(1, min_grain);
  const int parts = static_cast<int>(std::min<int64_t>(num_threads_, (n + grain - 1) / grain));
  if (parts <= 1) {
    fn(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mu_);
    job_ = &fn;
    job_n_ = n;
    job_parts_ = parts;
    pending_.store(num_threads_ - 1);
    generation_.fetch_add(1, std::memory_order_release);
  }
  wake_.notify_all();
  RunShare(0);
  // Workers finish quickly for compute kernels; spin briefly, then yield.
  for (int spins = 0; pending_.load(std::memory_order_acquire) != 0; ++spins) {
    if (spins < 4096) {
      _mm_pause();
    } else {
      std::this_thread::yield();
    }
  }
}

void ThreadPool::WorkerLoop(int index) {
  uint64_t seen = 0;
  for (;;) {
    // Spin a little before sleeping: back-to-back kernels arrive within
    // microseconds during a forward pass.
    for (int spins = 0; spins < 2048 && generation_.load(std::memory_order_acquire) == seen;
         ++spins) {
      _mm_pause();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      wake_.wait(lock, [&] { return generation_.load() != seen; });
      seen = generation_.load();
      if (stop_) return;
    }
    RunShare(index);
    pending_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

}  // namespace dsv4
