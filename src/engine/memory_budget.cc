#include "engine/memory_budget.h"

#include <fstream>
#include <sstream>

namespace dsv4::engine {

Result<MemoryInfo> ParseMemInfo(const std::string& text) {
  MemoryInfo info;
  bool have_total = false, have_available = false;
  std::istringstream in(text);
  std::string key;
  int64_t value = 0;
  std::string unit;
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    if (!(fields >> key >> value)) continue;
    if (key == "MemTotal:") {
      info.total_bytes = value * 1024;
      have_total = true;
    } else if (key == "MemAvailable:") {
      info.available_bytes = value * 1024;
      have_available = true;
    }
  }
  if (!have_total || !have_available) {
    return DataLoss("meminfo: MemTotal or MemAvailable missing");
  }
  return info;
}

Result<MemoryInfo> ReadMemInfo(const std::string& path) {
  std::ifstream f(path);
  if (!f) return IoError("cannot open {}", path);
  std::stringstream text;
  text << f.rdbuf();
  Result<MemoryInfo> info = ParseMemInfo(text.str());
  if (!info.ok()) return info.status().WithPrefix(path);
  return info;
}

Result<int64_t> ResolveKvBudget(const KvBudgetOptions& o, const MemoryInfo& m) {
  if (o.kv_cache_memory < 0) {
    return InvalidArgument("--kv-cache-memory must be positive, got {}", o.kv_cache_memory);
  }
  if (o.kv_cache_memory > 0) return o.kv_cache_memory;
  if (!(o.memory_utilization > 0 && o.memory_utilization <= 1)) {
    return InvalidArgument("--memory-utilization must be in (0, 1], got {}", o.memory_utilization);
  }
  const int64_t used = m.total_bytes - m.available_bytes;
  const int64_t budget =
      static_cast<int64_t>(o.memory_utilization * static_cast<double>(m.total_bytes)) - used -
      o.resident_reserve;
  if (budget <= 0) {
    return ResourceExhausted(
        "no memory left for the KV cache: --memory-utilization {} of {} bytes minus {} in use "
        "and {} reserved; raise --memory-utilization or set --kv-cache-memory",
        o.memory_utilization, m.total_bytes, used, o.resident_reserve);
  }
  return budget;
}

}  // namespace dsv4::engine
