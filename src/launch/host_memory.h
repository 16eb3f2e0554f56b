// The start-up memory check (docs/deploy.md "Memory"): weights + caches +
// working memory against what the host has, before anything is promised.
// An impossible --kv-cache-memory is refused with the numbers; a checkpoint
// larger than the memory left for it is served, but with a warning that its
// weights stream from disk.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"
#include "checkpoint/model_config.h"
#include "engine/memory_budget.h"
#include "launch/engine_options.h"

namespace dsv4::launch {

struct HostMemoryPlan {
  int64_t kv_bytes = 0;         // the cache budget handed to the planner
  int64_t working_bytes = 0;    // activations, logits and scratch (WorkingMemoryBytes)
  int64_t weight_bytes = 0;     // mapped weight files the forward reads
  bool weights_stream = false;  // weights + caches + working memory exceed MemAvailable
  std::string summary;          // one line for the start-up log
  std::string stream_warning;   // non-empty when weights_stream
};

// An upper estimate of the memory a forward needs besides weights and
// caches: per scheduled token 8 residual-stream-wide fp32 buffers (the
// hyper-connection streams, their mixes and the block outputs), plus fp32
// logits for every row that is sampled or verified.
int64_t WorkingMemoryBytes(const checkpoint::ModelConfig& config, const EngineOptions& options);

// kv_cache_memory > 0: InvalidArgument when it plus working memory exceeds
// MemAvailable (one line naming the numbers and what would fit).  Otherwise
// --memory-utilization F of MemTotal minus what is in use, working memory
// and the weights when they can stay resident; when they cannot (the host is
// smaller than the checkpoint), half of that share goes to the caches and the
// rest stays page cache for the streamed weights.  ResourceExhausted when
// nothing is left.
Result<HostMemoryPlan> PlanHostMemory(const engine::KvBudgetOptions& budget,
                                      const engine::MemoryInfo& host, int64_t weight_bytes,
                                      int64_t working_bytes);

// "1.5 GiB", "300.0 MiB", "1.0 TiB": binary units, one decimal.
std::string FormatBytes(int64_t bytes);

}  // namespace dsv4::launch
