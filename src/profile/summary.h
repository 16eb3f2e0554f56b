// The per-op table `dsv4 bench --profile-level kernel` prints
// (docs/profiling.md "Per-op table"): reads a written trace back and sums
// the kernel spans inside each "model.forward" span of the same thread,
// separately for prefill forwards and decode forwards.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/status.h"

namespace dsv4::profile {

struct OpStats {
  std::string name;
  int64_t calls = 0;
  double us = 0;     // summed duration
  double bytes = 0;  // summed "bytes" args
  double flops = 0;  // summed "flops" args
};

struct ForwardSummary {
  std::string label;  // "prefill" or "decode"
  int64_t forwards = 0;
  int64_t rows = 0;          // summed over the forwards
  double us = 0;             // summed forward time
  std::vector<OpStats> ops;  // leaf ops, most time first; "(other)" = forward time in no op
};

// Forwards with more than `decode_rows_max` rows count as prefill.  Spans
// named in `containers` (model.forward, layer, attention, ...) are not
// leaves.  DataLoss naming the path for a file that is not such a trace.
Result<std::vector<ForwardSummary>> SummarizeForwards(const std::string& trace_path,
                                                      int64_t decode_rows_max);

// The table as text: op, calls, ms per forward, share of forward time,
// GB/s, GFLOP/s.
std::string FormatOpTable(const ForwardSummary& s);

}  // namespace dsv4::profile
