// Streaming detokenization: ids in, UTF-8 text out, never a broken sequence.
#pragma once

#include <cstdint>
#include <span>
#include <string>

#include "text/tokenizer.h"

namespace dsv4::text {

// One per request.  Bytes of a character split across tokens are held back
// until the character completes; ill-formed bytes become U+FFFD as soon as
// they are known to be ill-formed.  Invariant (tested): the concatenation of
// all Push() results and Finish() equals tokenizer.Decode(all ids,
// skip_special), for any split of the ids.
class IncrementalDetokenizer {
 public:
  // REQUIRES: `tokenizer` outlives this object.
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special = false)
      : tokenizer_(tokenizer), skip_special_(skip_special) {}

  // Text that became final with these ids (possibly empty).
  std::string Push(std::span<const int32_t> ids);
  std::string Push(int32_t id) { return Push(std::span<const int32_t>(&id, 1)); }
  // Flushes held-back bytes (an incomplete sequence becomes U+FFFD).
  std::string Finish();
  // Bytes currently held back (0..3).
  size_t num_pending_bytes() const { return pending_.size(); }

 private:
  const Tokenizer& tokenizer_;
  bool skip_special_;
  std::string pending_;
};

}  // namespace dsv4::text
