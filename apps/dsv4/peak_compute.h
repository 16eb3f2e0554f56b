// The machine's peak arithmetic rate for each instruction mix the prefill
// kernels use (kernels/peak.h), measured on every thread of the forward's
// pool at once, as the STREAM triad (membw.h) measures its bandwidth.
#pragma once

#include <string>
#include <vector>

#include "base/thread_pool.h"
#include "kernels/peak.h"

namespace dsv4 {

struct PeakRate {
  kernels::PeakMix mix = kernels::PeakMix::kFp32Fma;
  std::string instruction;  // empty: the active ISA has no instruction for the mix
  double best_gflops = 0;   // of the passes; 2 FLOPs per multiply-add
  double median_gflops = 0;
  int threads = 0;
};

// Every mix: one untimed pass that sizes a pass to about pass_seconds, then
// `passes` timed passes, each one pool task per thread running the loop.
std::vector<PeakRate> MeasurePeakCompute(ThreadPool* pool, int passes = 5,
                                         double pass_seconds = 0.05);

// The rate of `mix` in rates; null if absent or unsupported.
const PeakRate* FindPeak(const std::vector<PeakRate>& rates, kernels::PeakMix mix);

}  // namespace dsv4
