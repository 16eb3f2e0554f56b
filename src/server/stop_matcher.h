// Stop strings, matched on the text side (the engine only knows token ids).
// Streaming-safe: text that might be the start of a stop string is held back
// until it is known not to be, so a client never sees part of a stop string.
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace dsv4::server {

class StopMatcher {
 public:
  // include_stop: the matched stop string stays in the output (vLLM's
  // include_stop_str_in_output); otherwise the output ends before it.
  explicit StopMatcher(std::vector<std::string> stops, bool include_stop = false);

  // Returns the text that became final.  Once a stop string appears, returns
  // the text before it (through it with include_stop) and stopped() turns
  // true; later calls return "".  Of stop strings that begin at the same
  // byte the shortest wins (it completed first).
  std::string Push(std::string_view text);
  // Text that is final without being searched (min_tokens: the output of
  // the first min_tokens tokens is never a stop).  REQUIRES: nothing held
  // back, i.e. every earlier call was PushUnsearched.
  std::string PushUnsearched(std::string_view text);
  // End of generation: releases held-back text.
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  bool include_stop_ = false;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace dsv4::server
