// The KV cache byte budget, resolved after the weights are resident:
// --kv-cache-memory BYTES, or --memory-utilization F of the host's RAM.
#pragma once

#include <cstdint>
#include <string>

#include "base/status.h"

namespace dsv4::engine {

struct MemoryInfo {
  int64_t total_bytes = 0;      // MemTotal
  int64_t available_bytes = 0;  // MemAvailable
};

// Parses /proc/meminfo text (values in kB).
Result<MemoryInfo> ParseMemInfo(const std::string& text);
Result<MemoryInfo> ReadMemInfo(const std::string& path = "/proc/meminfo");

struct KvBudgetOptions {
  int64_t kv_cache_memory = 0;      // --kv-cache-memory; > 0 wins
  double memory_utilization = 0.9;  // --memory-utilization, in (0, 1]
  // Bytes that will stay resident but MemAvailable counts as reclaimable:
  // memory-mapped weight pages (page cache) and scratch not yet touched.
  int64_t resident_reserve = 0;
};

// kv_cache_memory if set, else F * total - (total - available) - reserve (the
// reference's rule: the share of RAM the engine may use, minus what is
// already in use).  ResourceExhausted when nothing is left, naming the numbers.
Result<int64_t> ResolveKvBudget(const KvBudgetOptions& options, const MemoryInfo& memory);

}  // namespace dsv4::engine
