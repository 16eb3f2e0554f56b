// Progress reports: the line's fields, and what a non-terminal stream gets.
#include "base/progress.h"

#include <gtest/gtest.h>
#include <pty.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <regex>
#include <string>
#include <thread>
#include <vector>

namespace dsv4 {
namespace {

TEST(ProgressTest, FormatsPercentAmountsRateAndEta) {
  EXPECT_EQ(FormatProgress("make-tiny", 512 << 20, int64_t{2} << 30, ProgressUnit::kBytes, 2.0),
            "make-tiny  25%  512.0 MiB / 2.0 GiB  256.0 MiB/s  ETA 6.0 s");
  EXPECT_EQ(FormatProgress("load", 30, 120, ProgressUnit::kItems, 15.0),
            "load  25%  30 / 120  2.0/s  ETA 45 s");
  EXPECT_EQ(FormatProgress("load", 0, 120, ProgressUnit::kItems, 0.0), "load   0%  0 / 120");
  // Done: no ETA.  Long waits read in minutes and hours.
  EXPECT_EQ(FormatProgress("x", 10, 10, ProgressUnit::kItems, 5.0), "x 100%  10 / 10  2.0/s");
  EXPECT_EQ(FormatProgress("x", 1, 100, ProgressUnit::kItems, 10.0),
            "x   1%  1 / 100  0.1/s  ETA 16 min 30 s");
  EXPECT_EQ(FormatProgress("x", 1, 1000, ProgressUnit::kItems, 10.0),
            "x   0%  1 / 1000  0.1/s  ETA 2 h 46 min");
}

std::string ReadAll(std::FILE* f) {
  std::rewind(f);
  std::string s;
  char buf[256];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), f)) > 0) s.append(buf, n);
  return s;
}

// Not a terminal: a short run prints nothing (its caller logs the summary),
// whatever the number of threads adding, and never a carriage return.
TEST(ProgressTest, AShortRunOnAPlainStreamIsQuiet) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  {
    Progress p("prepack", 4000, ProgressUnit::kItems, f);
    std::vector<std::thread> threads;
    for (int t = 0; t < 4; ++t) {
      threads.emplace_back([&p] {
        for (int i = 0; i < 1000; ++i) p.Add(1);
      });
    }
    for (std::thread& t : threads) t.join();
    p.Finish();
  }  // the destructor does not print again
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(out, "");
}

// Not a terminal, a report due at every Add (interval 0): whole plain lines,
// one per report, no carriage return or escape, in FormatProgress's form.
TEST(ProgressTest, PlainLinesWhenNotATerminal) {
  std::FILE* f = std::tmpfile();
  ASSERT_NE(f, nullptr);
  Progress p("convert", int64_t{4} << 20, ProgressUnit::kBytes, f, /*plain_interval=*/0);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.Add(int64_t{1} << 20);
  std::this_thread::sleep_for(std::chrono::milliseconds(5));
  p.Add(int64_t{1} << 20);
  p.Finish();
  p.Add(int64_t{2} << 20);  // after Finish: counted, not printed
  const std::string out = ReadAll(f);
  std::fclose(f);
  EXPECT_EQ(out.find('\r'), std::string::npos);
  EXPECT_EQ(out.find('\x1b'), std::string::npos);
  const std::regex line(
      "convert  25%  1\\.0 MiB / 4\\.0 MiB  [0-9.]+ [KMG]?i?B/s  ETA [0-9.]+ (s|min [0-9]+ s)\n"
      "convert  50%  2\\.0 MiB / 4\\.0 MiB  [0-9.]+ [KMG]?i?B/s  ETA [0-9.]+ (s|min [0-9]+ s)\n");
  EXPECT_TRUE(std::regex_match(out, line)) << out;
  EXPECT_TRUE(
      std::regex_match(p.Summary(), std::regex("convert: 4\\.0 MiB in [0-9.]+ s \\(.*/s\\)")))
      << p.Summary();
}

TEST(ProgressTest, SummaryLine) {
  EXPECT_EQ(FormatProgressSummary("convert", int64_t{4} << 30, ProgressUnit::kBytes, 12.0),
            "convert: 4.0 GiB in 12 s (341.3 MiB/s)");
  EXPECT_EQ(FormatProgressSummary("eval", 2048, ProgressUnit::kItems, 4.0),
            "eval: 2048 in 4.0 s (512.0/s)");
  EXPECT_EQ(FormatProgressSummary("load", 0, ProgressUnit::kItems, 0.0), "load: 0 in 0.0 s");
}

// On a terminal (a pseudo-terminal here): the line is drawn in place
// ("\r" + text + erase to the end), ClearLine erases it for a line of the
// caller's and the next Add draws it again at once; Finish erases it.
TEST(ProgressTest, TerminalLineIsRewrittenAndCleared) {
  int master = -1, slave = -1;
  ASSERT_EQ(::openpty(&master, &slave, nullptr, nullptr, nullptr), 0);
  std::FILE* f = ::fdopen(slave, "w");
  ASSERT_NE(f, nullptr);
  {
    Progress p("convert", 4, ProgressUnit::kItems, f);
    std::this_thread::sleep_for(std::chrono::milliseconds(250));  // past the 0.2 s redraw limit
    p.Add(1);
    p.ClearLine();
    p.Add(1);  // drawn again without waiting
    p.Finish();
  }
  std::fclose(f);
  std::string out;
  char buf[512];
  ssize_t n;
  while ((n = ::read(master, buf, sizeof(buf))) > 0) {
    out.append(buf, static_cast<size_t>(n));
    if (out.size() > 4 && out.compare(out.size() - 4, 4, "\r\x1b[K") == 0 &&
        out.find("50%") != std::string::npos) {
      break;
    }
  }
  ::close(master);
  const std::regex want(
      "\rconvert  25%  1 / 4  [0-9.]+/s  ETA [0-9.]+ s\x1b\\[K"
      "\r\x1b\\[K"
      "\rconvert  50%  2 / 4  [0-9.]+/s  ETA [0-9.]+ s\x1b\\[K"
      "\r\x1b\\[K");
  EXPECT_TRUE(std::regex_match(out, want)) << ::testing::PrintToString(out);
}

}  // namespace
}  // namespace dsv4
