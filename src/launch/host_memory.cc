#include "launch/host_memory.h"

#include <fmt/format.h>

#include <algorithm>
#include <array>

namespace dsv4::launch {

namespace {

// fp32 buffers as wide as the residual stream held per scheduled token (an
// upper bound over the block's live intermediates; docs/deploy.md "Memory").
constexpr int64_t kStreamBuffersPerToken = 8;

}  // namespace

std::string FormatBytes(int64_t bytes) {
  static constexpr std::array<const char*, 5> kUnits = {"B", "KiB", "MiB", "GiB", "TiB"};
  double v = static_cast<double>(bytes);
  size_t u = 0;
  while (u + 1 < kUnits.size() && v >= 1024 * 0.95) {
    v /= 1024;
    ++u;
  }
  return u == 0 ? fmt::format("{} B", bytes) : fmt::format("{:.1f} {}", v, kUnits[u]);
}

int64_t WorkingMemoryBytes(const checkpoint::ModelConfig& c, const EngineOptions& o) {
  const int64_t stream = std::max<int64_t>(c.hc_mult, 1) * c.hidden_size * 4;
  const int64_t rows = o.max_num_seqs * (1 + std::max<int64_t>(o.num_speculative_tokens, 0));
  return o.max_num_batched_tokens * stream * kStreamBuffersPerToken + rows * c.vocab_size * 4;
}

Result<HostMemoryPlan> PlanHostMemory(const engine::KvBudgetOptions& o, const engine::MemoryInfo& m,
                                      int64_t weight_bytes, int64_t working_bytes) {
  HostMemoryPlan plan;
  plan.weight_bytes = weight_bytes;
  plan.working_bytes = working_bytes;
  const int64_t available = m.available_bytes;
  if (o.kv_cache_memory < 0) {
    return InvalidArgument("--kv-cache-memory must be positive, got {}", o.kv_cache_memory);
  }
  if (o.kv_cache_memory > 0) {
    // The caches are anonymous memory: they cannot stream from disk, so they
    // and the working memory must fit in what the host can hand out now.
    const int64_t room = available - working_bytes;
    if (o.kv_cache_memory > room) {
      return InvalidArgument(
          "--kv-cache-memory {} does not fit: the host has {} available of {} total; after {} "
          "of working memory at most {} is left for the caches",
          FormatBytes(o.kv_cache_memory), FormatBytes(available), FormatBytes(m.total_bytes),
          FormatBytes(working_bytes), FormatBytes(std::max<int64_t>(room, 0)));
    }
    plan.kv_bytes = o.kv_cache_memory;
  } else {
    if (!(o.memory_utilization > 0 && o.memory_utilization <= 1)) {
      return InvalidArgument("--memory-utilization must be in (0, 1], got {}",
                             o.memory_utilization);
    }
    const int64_t used = m.total_bytes - available;
    const int64_t share =
        static_cast<int64_t>(o.memory_utilization * static_cast<double>(m.total_bytes)) - used -
        working_bytes;
    if (share - o.resident_reserve > 0) {
      plan.kv_bytes = share - o.resident_reserve;
    } else {
      // The weights cannot stay resident whatever the caches get: they will
      // stream, so reserving them only starves the caches.  Half the share
      // for the caches, half left as page cache for the weight stream.
      plan.kv_bytes = share / 2;
    }
    if (plan.kv_bytes <= 0) {
      return ResourceExhausted(
          "no memory left for the caches: --memory-utilization {} of {} total is {}, of which {} "
          "is in use and {} is working memory; raise --memory-utilization or set "
          "--kv-cache-memory",
          o.memory_utilization, FormatBytes(m.total_bytes),
          FormatBytes(
              static_cast<int64_t>(o.memory_utilization * static_cast<double>(m.total_bytes))),
          FormatBytes(used), FormatBytes(working_bytes));
    }
  }
  // MemAvailable counts mapped weight pages already in the page cache as
  // reclaimable, so weights + caches + working memory must fit in it for the
  // weights to stay resident while the caches fill.
  plan.weights_stream = weight_bytes + plan.kv_bytes + working_bytes > available;
  plan.summary = fmt::format(
      "memory: weights {} (mapped) + caches {} + working memory {} = {}; host {} available of "
      "{} total",
      FormatBytes(weight_bytes), FormatBytes(plan.kv_bytes), FormatBytes(working_bytes),
      FormatBytes(weight_bytes + plan.kv_bytes + working_bytes), FormatBytes(available),
      FormatBytes(m.total_bytes));
  if (plan.weights_stream) {
    const int64_t resident = std::max<int64_t>(available - plan.kv_bytes - working_bytes, 0);
    plan.stream_warning = fmt::format(
        "weights ({}) do not fit beside the caches and working memory in the {} available, so "
        "weights will stream from disk: at most {} of them stay in the page cache, and a step may "
        "read up to {} from disk (steps bound by disk read bandwidth); use a host with more RAM "
        "or a smaller --kv-cache-memory (docs/deploy.md \"Memory\")",
        FormatBytes(weight_bytes), FormatBytes(available), FormatBytes(resident),
        FormatBytes(weight_bytes - resident));
  }
  return plan;
}

}  // namespace dsv4::launch
