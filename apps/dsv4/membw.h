// STREAM-style triad (a[i] = b[i] + s * c[i]) to measure the memory bandwidth
// the decode roofline is compared against, and a read-only pass over the same
// arrays.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "base/thread_pool.h"
#include "tensor/tensor.h"

namespace dsv4 {

struct TriadResult {
  double best_gbps = 0;  // best of the repetitions, STREAM byte counting (3 arrays)
  double median_gbps = 0;
  size_t array_bytes = 0;  // per array
  int threads = 0;
};

// Three arrays of array_bytes each (choose well past the LLC), first touched
// by the pool's threads, kept so that passes can be interleaved with other
// work (bench runs one between groups of decode steps).
class Triad {
 public:
  Triad(size_t array_bytes, ThreadPool* pool);
  // One pass, split statically over the pool; STREAM GB/s (3 arrays).
  double Pass();
  // One read-only pass over two of the arrays (each thread reads its share of
  // both as two interleaved streams, nothing is written): GB/s of bytes read.
  // A decode step only reads its weights, so this, not the triad (two reads
  // and a write), is the ceiling a GEMV can approach.
  double ReadPass();
  size_t array_bytes() const { return bytes_; }

 private:
  size_t bytes_;
  ThreadPool* pool_;
  Buffer a_, b_, c_;
  std::atomic<uint64_t> read_sum_{0};  // keeps the read pass's loads alive
};

// Best and median of passes' GB/s (unsorted input); zeros when empty.
TriadResult SummarizeTriad(std::vector<double> gbps, size_t array_bytes, int threads);

// Decode windows paired with the triad passes around them: window w (the
// steps between pass w and pass w + 1) streamed window_gbps[w], and its
// ratio is window_gbps[w] / mean(passes[w], passes[w + 1]).  A drift of the
// host's bandwidth within a run moves a window and the passes beside it
// together, while run-wide medians compare steps with passes far apart.
struct PairedRatios {
  double median = 0, q1 = 0, q3 = 0;  // of the windows' ratios (q: nearest rank)
  size_t windows = 0;
};
// REQUIRES: passes.size() == window_gbps.size() + 1; zeros when no window.
PairedRatios PairWindowsWithPasses(const std::vector<double>& window_gbps,
                                   const std::vector<double>& passes);

// Runs the triad `reps` times after one warm-up pass.
TriadResult MeasureTriad(size_t array_bytes, int reps, ThreadPool* pool);

}  // namespace dsv4
