#include "output_text.h"

#include <algorithm>

namespace dsv4::cli {

OutputText::OutputText(const text::Tokenizer& tokenizer, std::vector<std::string> stop,
                       int64_t min_tokens, bool include_stop)
    : detok_(tokenizer, /*skip_special=*/true),
      stop_(std::move(stop)),
      min_tokens_(min_tokens),
      include_stop_(include_stop) {
  for (const std::string& s : stop_) max_stop_size_ = std::max(max_stop_size_, s.size());
}

bool OutputText::Push(int32_t token) {
  const size_t old_size = text_.size();
  text_ += detok_.Push(token);
  if (++num_tokens_ <= min_tokens_) {
    searched_from_ = text_.size();
    return false;
  }
  const size_t at = FindStop(old_size);
  if (at == std::string::npos) return false;
  text_.resize(at);
  num_streamed_ = std::min(num_streamed_, text_.size());
  stopped_ = true;
  return true;
}

void OutputText::Finish() {
  if (stopped_ || finished_) return;
  finished_ = true;
  const size_t old_size = text_.size();
  text_ += detok_.Finish();
  // The flushed bytes (U+FFFD for a cut-off character) cannot complete a
  // stop string that is valid UTF-8, but check anyway: it is cheap.
  const size_t at = FindStop(old_size);
  if (at != std::string::npos) {
    text_.resize(at);
    stopped_ = true;
  }
}

size_t OutputText::FindStop(size_t old_size) const {
  if (stop_.empty() || text_.size() == old_size) return std::string::npos;
  // A new match must end in the new bytes, so it starts at most
  // max_stop_size_ - 1 bytes before them: the search stays O(new bytes).
  const size_t from = std::max(
      searched_from_, old_size >= max_stop_size_ ? old_size - max_stop_size_ + 1 : size_t{0});
  size_t best = std::string::npos, best_len = 0;
  for (const std::string& s : stop_) {
    const size_t at = text_.find(s, from);
    // Of matches that begin at one byte the shortest completed first.
    if (at < best || (at == best && at != std::string::npos && s.size() < best_len)) {
      best = at;
      best_len = s.size();
    }
  }
  if (best == std::string::npos || !include_stop_) return best;
  return best + best_len;
}

size_t OutputText::PendingStopPrefix() const {
  size_t longest = 0;
  for (const std::string& s : stop_) {
    const size_t max_len = std::min(s.size() - 1, text_.size() - searched_from_);
    for (size_t len = max_len; len > longest; --len) {
      if (text_.compare(text_.size() - len, len, s, 0, len) == 0) {
        longest = len;
        break;
      }
    }
  }
  return longest;
}

std::string OutputText::TakeDelta() {
  const bool final = stopped_ || finished_;
  const size_t safe = final ? text_.size() : text_.size() - PendingStopPrefix();
  if (safe <= num_streamed_) return {};
  std::string delta = text_.substr(num_streamed_, safe - num_streamed_);
  num_streamed_ = safe;
  return delta;
}

}  // namespace dsv4::cli
