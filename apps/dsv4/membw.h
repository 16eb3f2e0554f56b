// STREAM-style triad (a[i] = b[i] + s * c[i]) to measure the memory bandwidth
// the decode roofline is compared against.
#pragma once

#include <cstddef>

#include "base/thread_pool.h"

namespace dsv4 {

struct TriadResult {
  double best_gbps = 0;  // best of the repetitions, STREAM byte counting (3 arrays)
  double median_gbps = 0;
  size_t array_bytes = 0;  // per array
  int threads = 0;
};

// Runs the triad over arrays of array_bytes each (choose well past the LLC),
// `reps` times after one warm-up, split statically over the pool.
TriadResult MeasureTriad(size_t array_bytes, int reps, ThreadPool* pool);

}  // namespace dsv4
