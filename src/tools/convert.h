// `dsv4 convert`: native DeepSeek-V4 (FP8 + MXFP4) checkpoint -> W8A8
// (compressed-tensors, INT8 per output channel), with the reference
// converter's selection and numerics (docs/convert.md "What is converted (same
// rules as the reference)") and our improvements: streaming tensor by tensor
// (peak memory of a few MB, not a shard), every file atomic (config.json and
// the index included), and a marker whose source fingerprints are checked on
// --resume without re-hashing unchanged source shards.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "base/status.h"

namespace dsv4::tools {

// The marker file in the output directory.
inline constexpr char kConvertMarkerName[] = ".dsv4-w8a8-conversion.json";
inline constexpr char kConvertMarkerFormat[] = "dsv4-deepseek-v4-w8a8-v1";

struct ConvertOptions {
  std::string input_dir;
  std::string output_dir;  // must differ from input_dir
  // Validate and print the plan; write nothing.
  bool dry_run = false;
  // Continue an interrupted conversion: finished shards are validated and
  // kept, the rest converted.  Without it a non-empty output dir is an error.
  bool resume = false;
  // Shards converted at once (each streams through its own few-MB buffers);
  // the output bytes do not depend on it.  Values < 1 mean 1.
  int num_threads = 1;
  // A progress line on stderr while shards convert (base/progress.h) and a
  // summary line through `log` at the end.
  bool progress = false;
  // Receives progress and plan lines (no trailing newline); may be empty.
  std::function<void(const std::string&)> log;
};

struct ConvertSummary {
  int64_t num_shards = 0;
  int64_t num_int8 = 0;     // weights stored INT8 per channel
  int64_t num_bf16 = 0;     // FP8 weights dequantized to BF16
  int64_t num_copied = 0;   // tensors copied unchanged
  uint64_t total_size = 0;  // output tensor bytes (the index's total_size)
  int64_t shards_converted = 0;
  int64_t shards_resumed = 0;
  int64_t source_shards_hashed = 0;  // full re-hashes a resume needed
};

// Every error is one line naming the file (and tensor) concerned.
Result<ConvertSummary> ConvertToW8a8(const ConvertOptions& options);

}  // namespace dsv4::tools
