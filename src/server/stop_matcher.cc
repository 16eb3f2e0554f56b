#include "server/stop_matcher.h"

#include <algorithm>
#include <utility>

namespace dsv4::server {

StopMatcher::StopMatcher(std::vector<std::string> stops, bool include_stop)
    : include_stop_(include_stop) {
  for (std::string& s : stops) {
    if (!s.empty()) stops_.push_back(std::move(s));
  }
}

std::string StopMatcher::Push(std::string_view text) {
  if (stopped_) return "";
  held_.append(text);
  if (stops_.empty()) return std::exchange(held_, std::string());
  size_t first = std::string::npos, first_len = 0;
  for (const std::string& s : stops_) {
    const size_t at = held_.find(s);
    if (at < first || (at == first && at != std::string::npos && s.size() < first_len)) {
      first = at;
      first_len = s.size();
    }
  }
  if (first != std::string::npos) {
    stopped_ = true;
    std::string out = held_.substr(0, include_stop_ ? first + first_len : first);
    held_.clear();
    return out;
  }
  // Hold back the longest suffix that is a proper prefix of some stop string.
  size_t keep = 0;
  for (const std::string& s : stops_) {
    const size_t max_len = std::min(s.size() - 1, held_.size());
    for (size_t len = max_len; len > keep; --len) {
      if (held_.compare(held_.size() - len, len, s, 0, len) == 0) {
        keep = len;
        break;
      }
    }
  }
  std::string out = held_.substr(0, held_.size() - keep);
  held_.erase(0, held_.size() - keep);
  return out;
}

std::string StopMatcher::PushUnsearched(std::string_view text) {
  if (stopped_) return "";
  return std::exchange(held_, std::string()) + std::string(text);
}

std::string StopMatcher::Finish() {
  if (stopped_) return "";
  return std::exchange(held_, std::string());
}

}  // namespace dsv4::server
