#include "text/detokenizer.h"

#include "text/utf8.h"

namespace dsv4::text {

std::string IncrementalDetokenizer::Push(std::span<const int32_t> ids) {
  for (int32_t id : ids) {
    if (!tokenizer_.IsKnown(id) || (skip_special_ && tokenizer_.IsSpecial(id))) continue;
    pending_ += tokenizer_.TokenBytes(id);
  }
  // Only an incomplete-but-valid tail can still change meaning; everything in
  // front of it is final (maximal-subpart replacement never looks past it).
  const size_t keep = IncompleteUtf8Suffix(pending_);
  std::string out = SanitizeUtf8(std::string_view(pending_).substr(0, pending_.size() - keep));
  pending_.erase(0, pending_.size() - keep);
  return out;
}

std::string IncrementalDetokenizer::Finish() {
  std::string out = SanitizeUtf8(pending_);
  pending_.clear();
  return out;
}

}  // namespace dsv4::text
