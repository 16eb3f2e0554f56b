// The periodic statistics line: rates over the interval, quiet when idle.
#include "engine/stats_log.h"

#include <gtest/gtest.h>

namespace dsv4::engine {
namespace {

TEST(StatsLogTest, RatesOverTheIntervalAndQuietWhenIdle) {
  EngineStats prev, cur;
  EXPECT_FALSE(StatsLogLine(prev, cur, 10.0).has_value());  // idle: no line
  cur.prompt_tokens_total = 1000;
  cur.generation_tokens_total = 250;
  cur.num_running = 2;
  cur.num_waiting = 1;
  cur.cache_usage = 0.0312;
  EXPECT_EQ(*StatsLogLine(prev, cur, 10.0),
            "engine: prompt 100.0 tok/s, generation 25.0 tok/s, running 2, waiting 1, cache 3.1 %");
  // A later interval counts only its own tokens, and its drafts.
  prev = cur;
  cur.generation_tokens_total = 450;
  cur.spec_num_drafts = 100;  // verify steps with drafts
  cur.spec_num_draft_tokens = 200;
  cur.spec_num_accepted_tokens = 120;
  EXPECT_EQ(*StatsLogLine(prev, cur, 5.0),
            "engine: prompt 0.0 tok/s, generation 40.0 tok/s, running 2, waiting 1, cache 3.1 %, "
            "MTP acceptance 60.0 % (mean accepted length 2.20)");
  // Requests still queued keep the line coming even without tokens.
  prev = cur;
  cur.num_running = 0;
  EXPECT_TRUE(StatsLogLine(prev, cur, 10.0).has_value());
  cur.num_waiting = 0;
  EXPECT_FALSE(StatsLogLine(prev, cur, 10.0).has_value());
}

}  // namespace
}  // namespace dsv4::engine
