// One request's output text on the caller's side of the engine: streaming
// detokenization and stop strings (docs/sampling.md §5, "Stop strings").  A stop string is
// looked for after every committed token, also inside one multi-token MTP
// step; on a match the text is cut where the stop string begins (the stop
// text itself is removed, as in OpenAI's API, unless include_stop) and no
// later token counts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/detokenizer.h"
#include "text/tokenizer.h"

namespace dsv4::cli {

class OutputText {
 public:
  // Special tokens (EOS, ...) are skipped in the text, as vLLM's default
  // skip_special_tokens.  REQUIRES: `tokenizer` outlives this object.
  // min_tokens: the text of the first min_tokens tokens is never searched
  // (vLLM's min_tokens); include_stop: a matched stop string stays at the
  // end of the text (vLLM's include_stop_str_in_output).
  OutputText(const text::Tokenizer& tokenizer, std::vector<std::string> stop,
             int64_t min_tokens = 0, bool include_stop = false);

  // Appends one committed token; true when it completed a stop string.
  // REQUIRES: !stopped().
  bool Push(int32_t token);
  // End of the output without a stop string: flushes held-back bytes.
  void Finish();

  bool stopped() const { return stopped_; }
  const std::string& text() const { return text_; }

  // Streaming: the text that became final since the previous call.  Text
  // that may still turn out to begin a stop string is held back until the
  // next tokens decide it.
  std::string TakeDelta();

 private:
  // Where the text ends after the earliest stop-string match that ends in
  // text_[old_size..] and begins at or after searched_from_, or npos.
  size_t FindStop(size_t old_size) const;
  // Length of the longest suffix of text_ that is a proper prefix of a stop string.
  size_t PendingStopPrefix() const;

  text::IncrementalDetokenizer detok_;
  std::vector<std::string> stop_;
  size_t max_stop_size_ = 0;
  int64_t min_tokens_ = 0;
  bool include_stop_ = false;
  int64_t num_tokens_ = 0;
  size_t searched_from_ = 0;  // text before it came from the first min_tokens tokens
  std::string text_;
  size_t num_streamed_ = 0;  // bytes of text_ handed out by TakeDelta
  bool stopped_ = false;
  bool finished_ = false;
};

}  // namespace dsv4::cli
