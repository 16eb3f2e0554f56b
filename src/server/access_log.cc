#include "server/access_log.h"

#include <fmt/format.h>

namespace dsv4::server {

std::string AccessLine(const AccessRecord& r) {
  const std::string status = r.status > 0 ? std::to_string(r.status) : std::string("-");
  const std::string ttft = r.ttft_s >= 0 ? fmt::format("{:.3f}s", r.ttft_s) : std::string("-");
  return fmt::format(
      "access: POST {} {} id={} prompt={} completion={} cached={} ttft={} total={:.3f}s "
      "finish={}",
      r.route, status, r.id.empty() ? "-" : r.id, r.prompt_tokens, r.completion_tokens,
      r.cached_tokens, ttft, r.total_s, r.finish.empty() ? "-" : r.finish);
}

}  // namespace dsv4::server
