#include "server/api_key.h"

#include <gtest/gtest.h>

#include <string>

namespace dsv4::server {
namespace {

TEST(ApiKey, ConstantTimeEqual) {
  const uint8_t a[4] = {1, 2, 3, 4};
  const uint8_t b[4] = {1, 2, 3, 4};
  const uint8_t first[4] = {9, 2, 3, 4};
  const uint8_t last[4] = {1, 2, 3, 5};
  EXPECT_TRUE(ConstantTimeEqual(a, b, 4));
  EXPECT_FALSE(ConstantTimeEqual(a, first, 4));
  EXPECT_FALSE(ConstantTimeEqual(a, last, 4));
  EXPECT_TRUE(ConstantTimeEqual(a, first, 0));
}

TEST(ApiKey, MatchesOnlyTheExactBearerHeader) {
  const ApiKeyCheck check("sekret");
  EXPECT_TRUE(check.enabled());
  EXPECT_TRUE(check.Matches("Bearer sekret"));
  for (const char* wrong :
       {"", "Bearer", "Bearer ", "Bearer sekre", "Bearer sekret ", "Bearer sekreT", "bearer sekret",
        "sekret", "Bearer sekretsekret", "Basic sekret"}) {
    EXPECT_FALSE(check.Matches(wrong)) << wrong;
  }
  // Keys with any bytes (the header value is compared whole).
  const std::string odd("k\0y\xff", 4);
  EXPECT_TRUE(ApiKeyCheck(odd).Matches("Bearer " + odd));
  EXPECT_FALSE(ApiKeyCheck(odd).Matches("Bearer k"));
}

TEST(ApiKey, NoKeyAcceptsEverything) {
  const ApiKeyCheck none("");
  EXPECT_FALSE(none.enabled());
  EXPECT_TRUE(none.Matches(""));
  EXPECT_TRUE(none.Matches("Bearer anything"));
}

}  // namespace
}  // namespace dsv4::server
