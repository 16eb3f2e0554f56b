// Shared setup of the text fuzz targets: the V4-equivalent test tokenizer,
// loaded once per process.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <string>

#include "text/tokenizer.h"

namespace dsv4::text::fuzz {

inline const Tokenizer& V4Tokenizer() {
  static const Tokenizer* tok = [] {
    const std::string dir = DSV4_TEST_DATA_DIR "/tokenizer/";
    auto t =
        Tokenizer::Load(dir + "deepseek_v3_tokenizer.json", dir + "v4_known_added_tokens.json");
    if (!t.ok()) {
      std::fprintf(stderr, "%s\n", t.status().ToString().c_str());
      std::abort();
    }
    return std::move(t).value().release();
  }();
  return *tok;
}

// A property violation: abort so libFuzzer records a reproducer.
inline void Require(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "property violated: %s\n", what);
    std::abort();
  }
}

}  // namespace dsv4::text::fuzz
