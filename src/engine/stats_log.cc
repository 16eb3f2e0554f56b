#include "engine/stats_log.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsv4::engine {

std::optional<std::string> StatsLogLine(const EngineStats& prev, const EngineStats& cur,
                                        double seconds) {
  const int64_t prompt = cur.prompt_tokens_total - prev.prompt_tokens_total;
  const int64_t generated = cur.generation_tokens_total - prev.generation_tokens_total;
  if (prompt == 0 && generated == 0 && cur.num_running == 0 && cur.num_waiting == 0) {
    return std::nullopt;
  }
  const double s = std::max(seconds, 1e-9);
  std::string line = fmt::format(
      "engine: prompt {:.1f} tok/s, generation {:.1f} tok/s, running {}, waiting {}, "
      "cache {:.1f} %",
      static_cast<double>(prompt) / s, static_cast<double>(generated) / s, cur.num_running,
      cur.num_waiting, 100.0 * cur.cache_usage);
  const int64_t drafts = cur.spec_num_draft_tokens - prev.spec_num_draft_tokens;
  const int64_t verifies = cur.spec_num_drafts - prev.spec_num_drafts;
  if (drafts > 0 && verifies > 0) {
    const int64_t accepted = cur.spec_num_accepted_tokens - prev.spec_num_accepted_tokens;
    line += fmt::format(", MTP acceptance {:.1f} % (mean accepted length {:.2f})",
                        100.0 * static_cast<double>(accepted) / static_cast<double>(drafts),
                        1.0 + static_cast<double>(accepted) / static_cast<double>(verifies));
  }
  return line;
}

}  // namespace dsv4::engine
