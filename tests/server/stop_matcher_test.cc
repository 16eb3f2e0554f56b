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

TEST(StopMatcher, IncludeStopKeepsTheStopStringShortestFirst) {
  StopMatcher m({"END"}, /*include_stop=*/true);
  EXPECT_EQ(m.Push("abc E"), "abc ");
  EXPECT_EQ(m.Push("ND tail"), "END");
  EXPECT_TRUE(m.stopped());
  StopMatcher tie({"abcd", "ab"}, /*include_stop=*/true);
  EXPECT_EQ(tie.Push("xabcd"), "xab");  // both begin at 1: "ab" completed first
}

TEST(StopMatcher, UnsearchedTextIsFinalAndNeverAStop) {
  // min_tokens: the first tokens' text passes unsearched; a stop string is
  // found only in text pushed after it.
  StopMatcher m({"ab"});
  EXPECT_EQ(m.PushUnsearched("xab"), "xab");
  EXPECT_FALSE(m.stopped());
  EXPECT_EQ(m.Push("a"), "");  // may start "ab"
  EXPECT_EQ(m.Push("b!"), "");
  EXPECT_TRUE(m.stopped());
  EXPECT_EQ(m.PushUnsearched("late"), "");
}

}  // namespace
}  // namespace dsv4::server
