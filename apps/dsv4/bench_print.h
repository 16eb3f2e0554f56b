// The lines dsv4 bench prints for peak compute and prefill FLOPs
// (docs/performance.md "Measured bytes, peak compute and prefill FLOPs").
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "bench_costs.h"
#include "peak_compute.h"

namespace dsv4::cli {

// One line per instruction mix: its instructions, best and median GFLOP/s.
std::string FormatPeakRates(const std::vector<PeakRate>& rates);

// Prefill FLOPs per token at prompt_len, then the achieved GFLOP/s
// (tok_per_s x FLOPs/token) as a share of each mix's median peak and of the
// mix-weighted peak: the time every mix's FLOPs would take at that mix's
// peak, over the time taken.
std::string FormatPrefillCompute(int64_t prompt_len, double tok_per_s, const PrefillFlops& flops,
                                 const std::vector<PeakRate>& rates);

// The mix-weighted share (0 when a mix with FLOPs has no measured peak).
double MixWeightedShare(double tok_per_s, const PrefillFlops& flops,
                        const std::vector<PeakRate>& rates);

}  // namespace dsv4::cli
