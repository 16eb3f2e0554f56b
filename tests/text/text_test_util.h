// Shared fixtures for the text tests: the V4-equivalent test tokenizer
// (DeepSeek-V3 tokenizer.json + the confirmed V4 added-token table, see
// tests/data/tokenizer/README.md), loaded once per test binary.
#pragma once

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <string>

#include "text/tokenizer.h"

namespace dsv4::text::testing {

inline std::string DataPath(const std::string& rel) {
  return std::string(DSV4_TEST_DATA_DIR) + "/" + rel;
}

inline std::string ReadText(const std::string& rel) {
  std::ifstream f(DataPath(rel), std::ios::binary);
  EXPECT_TRUE(f.good()) << "missing test data " << rel;
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

inline const Tokenizer& V4Tokenizer() {
  static const Tokenizer* tok = [] {
    auto t = Tokenizer::Load(DataPath("tokenizer/deepseek_v3_tokenizer.json"),
                             DataPath("tokenizer/v4_known_added_tokens.json"));
    if (!t.ok()) {
      ADD_FAILURE() << t.status().ToString();
      std::abort();
    }
    return std::move(t).value().release();
  }();
  return *tok;
}

}  // namespace dsv4::text::testing
