// Wall-clock helpers for log lines and progress (not for benchmarks, which
// time with Google Benchmark or dsv4 bench).
#pragma once

#include <chrono>

namespace dsv4 {

// Seconds of the steady clock since t0.
inline double SecondsSince(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

}  // namespace dsv4
