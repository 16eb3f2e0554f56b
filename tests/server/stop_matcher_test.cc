#include "server/stop_matcher.h"

#include <gtest/gtest.h>

namespace dsv4::server {
namespace {

TEST(StopMatcher, HoldsBackPrefixesAndCutsAtTheStop) {
  StopMatcher m({"END", "xy"});
  EXPECT_EQ(m.Push("abc E"), "abc ");  // "E" may start "END"
  EXPECT_EQ(m.Push("N"), "");
  EXPECT_EQ(m.Push("X more"), "ENX more");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push(" tail EN"), " tail ");
  EXPECT_EQ(m.Push("D after"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.Push("ignored"), "");
  EXPECT_EQ(m.Finish(), "");
}

TEST(StopMatcher, EarliestStopWinsAndFinishFlushes) {
  StopMatcher a({"bc", "abcd"});
  EXPECT_EQ(a.Push("xabcd"), "x");  // "abcd" starts first
  StopMatcher b({"zz"});
  EXPECT_EQ(b.Push("az"), "a");
  EXPECT_EQ(b.Finish(), "z");
  StopMatcher none({});
  EXPECT_EQ(none.Push("all"), "all");
}

}  // namespace
}  // namespace dsv4::server
