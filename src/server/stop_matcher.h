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
  explicit StopMatcher(std::vector<std::string> stops);

  // Returns the text that became final.  Once a stop string appears, returns
  // the text before it and stopped() turns true; later calls return "".
  std::string Push(std::string_view text);
  // End of generation: releases held-back text.
  std::string Finish();
  bool stopped() const { return stopped_; }

 private:
  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace dsv4::server
