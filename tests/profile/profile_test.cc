// The trace recorder (src/profile): flag semantics, the trace-event schema of
// what it writes, span nesting per thread, bounded memory, level off, several
// recording threads, atomic writes.
#include "profile/profile.h"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "profile/options.h"
#include "profile/session.h"
#include "profile/summary.h"

namespace dsv4::profile {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

fs::path TempDir(const std::string& name) {
  const fs::path dir =
      fs::temp_directory_path() / ("dsv4_profile_test_" + std::to_string(::getpid())) / name;
  fs::remove_all(dir);
  fs::create_directories(dir);
  return dir;
}

json ReadTrace(const std::string& path) {
  std::ifstream in(path);
  EXPECT_TRUE(in.good()) << path;
  return json::parse(in);  // throws (fails the test) on invalid JSON
}

// The events of a trace other than metadata ('M').
std::vector<json> Recorded(const json& trace) {
  std::vector<json> out;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "M") out.push_back(e);
  }
  return out;
}

SessionOptions Options(const fs::path& dir, uint32_t levels) {
  SessionOptions o;
  o.levels = levels;
  o.path = (dir / "trace.json").string();
  return o;
}

// Checks every event against the trace-event format's schema for the phases
// the recorder writes.
void ExpectSchema(const json& trace) {
  ASSERT_TRUE(trace.is_object());
  ASSERT_TRUE(trace.at("traceEvents").is_array());
  EXPECT_EQ(trace.at("displayTimeUnit"), "ms");
  EXPECT_TRUE(trace.at("otherData").is_object());
  for (const json& e : trace.at("traceEvents")) {
    SCOPED_TRACE(e.dump());
    ASSERT_TRUE(e.is_object());
    ASSERT_TRUE(e.at("name").is_string());
    ASSERT_TRUE(e.at("pid").is_number_integer());
    ASSERT_TRUE(e.at("tid").is_number_integer());
    const std::string ph = e.at("ph");
    ASSERT_TRUE(ph == "X" || ph == "i" || ph == "C" || ph == "b" || ph == "e" || ph == "M") << ph;
    if (ph == "M") {
      EXPECT_TRUE(e.at("args").at("name").is_string());
      continue;
    }
    EXPECT_TRUE(e.at("cat").is_string());
    ASSERT_TRUE(e.at("ts").is_number());
    EXPECT_GE(e.at("ts").get<double>(), 0.0);
    if (ph == "X") {
      ASSERT_TRUE(e.at("dur").is_number());
      EXPECT_GE(e.at("dur").get<double>(), 0.0);
    }
    if (ph == "b" || ph == "e") {
      EXPECT_TRUE(e.at("id").is_number_integer());
    }
    if (ph == "C") {
      EXPECT_FALSE(e.at("args").empty());
    }
    if (e.contains("args")) {
      EXPECT_TRUE(e.at("args").is_object());
    }
  }
}

// On each thread, complete spans must form a properly nested forest: sorted
// by start (longer first on ties), each span lies inside the innermost open
// one or starts after it has ended.
void ExpectNested(const json& trace) {
  std::map<int, std::vector<std::pair<double, double>>> by_tid;
  for (const json& e : Recorded(trace)) {
    if (e.at("ph") != "X") continue;
    const double ts = e.at("ts");
    by_tid[e.at("tid").get<int>()].push_back({ts, ts + e.at("dur").get<double>()});
  }
  for (auto& [tid, spans] : by_tid) {
    std::sort(spans.begin(), spans.end(), [](const auto& a, const auto& b) {
      return a.first != b.first ? a.first < b.first : a.second > b.second;
    });
    std::vector<double> open_ends;
    for (const auto& [begin, end] : spans) {
      while (!open_ends.empty() && begin >= open_ends.back()) open_ends.pop_back();
      if (!open_ends.empty()) {
        EXPECT_LE(end, open_ends.back()) << "tid " << tid << ": span [" << begin << ", " << end
                                         << ") overlaps its enclosing span's end";
      }
      open_ends.push_back(end);
    }
  }
}

void Nest(int depth, int fanout) {
  Span s(kKernel, "test", "nest");
  s.Arg("depth", depth);
  if (depth == 0) return;
  for (int i = 0; i < fanout; ++i) Nest(depth - 1, fanout);
}

TEST(ProfileOptions, ParsesLevelLists) {
  EXPECT_EQ(*ParseLevels("e2e"), kE2e);
  EXPECT_EQ(*ParseLevels("kernel"), kKernel);
  EXPECT_EQ(*ParseLevels("e2e,kernel"), kE2e | kKernel);
  EXPECT_EQ(*ParseLevels(" E2E , Kernel "), kE2e | kKernel);
  EXPECT_EQ(*ParseLevels("verbose"), kE2e | kKernel | kVerbose);
  EXPECT_EQ(*ParseLevels("e2e,verbose"), kE2e | kKernel | kVerbose);
  for (const char* bad : {"", ",", "gpu", "e2e,,kernel", "e2e;kernel", ",e2e"}) {
    const Result<uint32_t> r = ParseLevels(bad);
    ASSERT_FALSE(r.ok()) << bad;
    EXPECT_NE(r.status().message().find("--profile-level"), std::string::npos);
  }
  EXPECT_EQ(LevelsName(kE2e | kKernel), "e2e,kernel");
  EXPECT_EQ(LevelsName(kLevelMask), "verbose");
}

TEST(ProfileOptions, FlagsFollowTheReference) {
  // --profile-output / --profile-level need --profile.
  EXPECT_FALSE(ResolveProfileFlags(false, "x", true, kDefaultLevels, false).ok());
  EXPECT_FALSE(ResolveProfileFlags(false, kDefaultOutput, false, "e2e", true).ok());
  const ProfileFlags off = *ResolveProfileFlags(false, "", false, "", false);
  EXPECT_FALSE(off.enabled);
  const ProfileFlags on = *ResolveProfileFlags(true, "", false, "", false);
  EXPECT_TRUE(on.enabled);
  EXPECT_EQ(on.output, "./profile_out");
  EXPECT_EQ(on.levels, kE2e | kKernel);
  EXPECT_FALSE(ResolveProfileFlags(true, "d", true, "nope", true).ok());
  EXPECT_EQ(TracePath("out", 1), "out/trace.json");
  EXPECT_EQ(TracePath("out/", 3), "out/trace-3.json");
  EXPECT_EQ(TracePath("run.json", 2), "run.json");
}

TEST(ProfileSession, TraceIsValidTraceEventJson) {
  const fs::path dir = TempDir("schema");
  ASSERT_TRUE(StartSession(Options(dir / "sub", kE2e | kKernel)).ok());
  SetThreadName("main-test");
  {
    Span step(kE2e, "engine", "step");
    step.Arg("prefill_rows", 128).Arg("decode_rows", 3).Str("note", "a \"quoted\"\n name");
    Nest(2, 2);
  }
  Instant(kE2e, "engine", "admit", {{"requests", 2}});
  Counter(kE2e, "engine", "running", {{"requests", 4}});
  AsyncBegin(kE2e, "request", "request", 7, -1, {{"prompt_tokens", 5}});
  AsyncEnd(kE2e, "request", "request", 7, -1, {}, "finish_reason", "stop");
  Complete(kE2e, "engine", "explicit", NowNs(), 1500, {{"nan", 0.0 / 0.0}});
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok()) << s.status().ToString();
  EXPECT_EQ(s->path, (dir / "sub" / "trace.json").string());
  EXPECT_EQ(s->dropped_events, 0);
  EXPECT_EQ(s->bytes, static_cast<int64_t>(fs::file_size(s->path)));
  const json trace = ReadTrace(s->path);
  ExpectSchema(trace);
  ExpectNested(trace);
  const std::vector<json> events = Recorded(trace);
  // step + 7 nest spans + instant + counter + 2 async + complete.
  EXPECT_EQ(events.size(), 13u);
  bool named = false;
  for (const json& e : trace.at("traceEvents")) {
    named |= e.at("ph") == "M" && e.at("args").at("name") == "main-test";
  }
  EXPECT_TRUE(named);
  for (const json& e : events) {
    if (e.at("name") == "step") {
      EXPECT_EQ(e.at("args").at("prefill_rows"), 128);
      EXPECT_EQ(e.at("args").at("note"), "a \"quoted\"\n name");
    }
    if (e.at("name") == "explicit") {
      EXPECT_EQ(e.at("dur").get<double>(), 1.5);  // microseconds
      EXPECT_TRUE(e.at("args").at("nan").is_null());
    }
    if (e.at("ph") == "e") {
      EXPECT_EQ(e.at("args").at("finish_reason"), "stop");
    }
  }
  // Atomic write: nothing but the trace is left in its directory.
  int files = 0;
  for (const auto& f : fs::directory_iterator(dir / "sub")) {
    EXPECT_EQ(f.path().filename(), "trace.json");
    ++files;
  }
  EXPECT_EQ(files, 1);
}

TEST(ProfileSession, LevelOffRecordsNothing) {
  EXPECT_FALSE(Enabled(kE2e) || Enabled(kKernel) || Enabled(kVerbose));
  for (int i = 0; i < 1000; ++i) {
    Span s(kE2e | kKernel | kVerbose, "test", "off");
    EXPECT_FALSE(static_cast<bool>(s));
    Instant(kE2e, "test", "off");
  }
  const fs::path dir = TempDir("off");
  // Only e2e on: kernel and verbose events are not recorded.
  ASSERT_TRUE(StartSession(Options(dir, kE2e)).ok());
  EXPECT_TRUE(Enabled(kE2e));
  EXPECT_FALSE(Enabled(kKernel));
  for (int i = 0; i < 100; ++i) {
    Span k(kKernel, "test", "kernel");
    Span v(kVerbose, "test", "verbose");
    Instant(kVerbose, "test", "verbose");
  }
  { Span e(kE2e, "test", "e2e"); }
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  EXPECT_FALSE(Enabled(kE2e));
  const std::vector<json> events = Recorded(ReadTrace(s->path));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "e2e");
  // After the stop, nothing is recorded again.
  {
    Span after(kE2e, "test", "after");
    EXPECT_FALSE(static_cast<bool>(after));
  }
}

TEST(ProfileSession, MemoryIsBoundedUnderAFlood) {
  const fs::path dir = TempDir("flood");
  SessionOptions o = Options(dir, kKernel);
  o.ring_events = 256;
  o.flush_interval_ms = 60'000;  // no drain during the flood: only the ring holds events
  // A fresh thread gets a ring of the session's capacity.
  ASSERT_TRUE(StartSession(o).ok());
  constexpr int kEvents = 200'000;
  std::thread flood([] {
    for (int i = 0; i < kEvents; ++i) Instant(kKernel, "test", "flood", {{"i", i}});
  });
  flood.join();
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  const std::vector<json> events = Recorded(ReadTrace(s->path));
  // The ring kept its capacity: everything past it was dropped and counted,
  // and the first events are the ones kept.
  EXPECT_EQ(static_cast<int64_t>(events.size()), 256);
  EXPECT_EQ(s->dropped_events, kEvents - 256);
  EXPECT_EQ(events.front().at("args").at("i"), 0);
  EXPECT_EQ(ReadTrace(s->path).at("otherData").at("dropped_events"), kEvents - 256);
}

TEST(ProfileSession, StreamsLongSessionsWithoutLoss) {
  const fs::path dir = TempDir("stream");
  SessionOptions o = Options(dir, kKernel);
  o.ring_events = 1024;
  o.flush_interval_ms = 1;
  ASSERT_TRUE(StartSession(o).ok());
  constexpr int kEvents = 20'000;
  std::thread t([] {
    for (int i = 0; i < kEvents; ++i) {
      Instant(kKernel, "test", "e", {{"i", i}});
      // Stay well below what the flusher drains, so nothing is dropped.
      if (i % 256 == 255) std::this_thread::sleep_for(std::chrono::milliseconds(3));
    }
  });
  t.join();
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dropped_events, 0);
  const std::vector<json> events = Recorded(ReadTrace(s->path));
  ASSERT_EQ(static_cast<int>(events.size()), kEvents);  // 20x the ring, all streamed out
  for (int i = 0; i < kEvents; ++i) EXPECT_EQ(events[static_cast<size_t>(i)].at("args").at("i"), i);
}

TEST(ProfileSession, ManyThreadsRecordConcurrently) {
  const fs::path dir = TempDir("threads");
  SessionOptions o = Options(dir, kKernel);
  o.ring_events = 1 << 15;  // holds a thread's whole output: no drops
  o.flush_interval_ms = 1;
  ASSERT_TRUE(StartSession(o).ok());
  constexpr int kThreads = 8;
  constexpr int kRounds = 400;  // x 7 spans (Nest(2, 2))
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([t] {
      SetThreadName(Intern("worker-" + std::to_string(t)));
      for (int i = 0; i < kRounds; ++i) Nest(2, 2);
    });
  }
  for (std::thread& t : threads) t.join();
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  EXPECT_EQ(s->dropped_events, 0);
  const json trace = ReadTrace(s->path);
  ExpectSchema(trace);
  ExpectNested(trace);
  std::map<int, int> per_tid;
  for (const json& e : Recorded(trace)) ++per_tid[e.at("tid").get<int>()];
  ASSERT_EQ(per_tid.size(), static_cast<size_t>(kThreads));
  for (const auto& [tid, n] : per_tid) EXPECT_EQ(n, kRounds * 7) << tid;
  std::set<std::string> names;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "M" && e.at("name") == "thread_name") names.insert(e.at("args").at("name"));
  }
  for (int t = 0; t < kThreads; ++t) EXPECT_TRUE(names.count("worker-" + std::to_string(t))) << t;
}

TEST(ProfileSession, StartStopErrorsAndStraddlingSpans) {
  const Result<SessionSummary> none = StopSession();
  ASSERT_FALSE(none.ok());
  EXPECT_EQ(none.status().code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(none.status().message(), "no profile is running");
  SessionOptions o;
  o.levels = 0;
  o.path = (TempDir("errors") / "t.json").string();
  EXPECT_FALSE(StartSession(o).ok());  // no level
  // A path below a regular file cannot be created.
  const fs::path blocker = TempDir("errors") / "file";
  std::ofstream(blocker) << "x";
  o.levels = kE2e;
  o.path = (blocker / "t.json").string();
  const Status bad = StartSession(o);
  EXPECT_EQ(bad.code(), StatusCode::kIoError) << bad.ToString();
  EXPECT_FALSE(SessionActive());

  const fs::path dir = TempDir("straddle");
  ASSERT_TRUE(StartSession(Options(dir / "a", kE2e)).ok());
  EXPECT_EQ(StartSession(Options(dir / "b", kE2e)).code(), StatusCode::kFailedPrecondition);
  auto open = std::make_unique<Span>(kE2e, "test", "straddles");
  ASSERT_TRUE(StopSession().ok());
  ASSERT_TRUE(StartSession(Options(dir / "b", kE2e)).ok());
  open.reset();  // ends in session 2, begun in session 1: in neither trace
  { Span s(kE2e, "test", "second"); }
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  const std::vector<json> events = Recorded(ReadTrace(s->path));
  ASSERT_EQ(events.size(), 1u);
  EXPECT_EQ(events[0].at("name"), "second");
  EXPECT_TRUE(Recorded(ReadTrace((dir / "a" / "trace.json").string())).empty());
}

TEST(ProfileSummary, PerOpTableSumsLeafSpansPerPhase) {
  const fs::path dir = TempDir("summary");
  ASSERT_TRUE(StartSession(Options(dir, kKernel)).ok());
  const int64_t t0 = NowNs();
  // A prefill forward of 64 rows (two ops) and two decode forwards of 1 row.
  Complete(kKernel, "kernel", "model.forward", t0, 10'000'000, {{"rows", 64}});
  Complete(kKernel, "kernel", "layer", t0, 9'000'000, {{"rows", 64}});
  Complete(kKernel, "kernel", "moe", t0, 6'000'000, {{"bytes", 6e9 * 0.006}, {"flops", 1e9}});
  Complete(kKernel, "kernel", "attn.q", t0 + 6'000'000, 2'000'000, {{"bytes", 1e6}});
  for (int i = 0; i < 2; ++i) {
    const int64_t b = t0 + 20'000'000 + i * 2'000'000;
    Complete(kKernel, "kernel", "model.forward", b, 1'000'000, {{"rows", 1}});
    Complete(kKernel, "kernel", "moe", b, 500'000, {{"bytes", 1e6}, {"flops", 2e6}});
  }
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  const Result<std::vector<ForwardSummary>> t = SummarizeForwards(s->path, 1);
  ASSERT_TRUE(t.ok()) << t.status().ToString();
  ASSERT_EQ(t->size(), 2u);
  const ForwardSummary& prefill = (*t)[0];
  EXPECT_EQ(prefill.label, "prefill");
  EXPECT_EQ(prefill.forwards, 1);
  EXPECT_EQ(prefill.rows, 64);
  ASSERT_EQ(prefill.ops.size(), 3u);  // moe, attn.q, (other); layer is a container
  EXPECT_EQ(prefill.ops[0].name, "moe");
  // Times come back from trace timestamps in microseconds since the clock's
  // epoch: at a long uptime a difference of two of them keeps ~1e-5 us of
  // precision, so the sums are equal to within a nanosecond, not bitwise.
  EXPECT_NEAR(prefill.ops[0].us, 6000, 1e-3);
  EXPECT_EQ(prefill.ops[2].name, "(other)");
  EXPECT_NEAR(prefill.ops[2].us, 2000, 1e-3);
  const ForwardSummary& decode = (*t)[1];
  EXPECT_EQ(decode.forwards, 2);
  ASSERT_EQ(decode.ops.size(), 2u);
  EXPECT_EQ(decode.ops[0].calls, 2);
  EXPECT_DOUBLE_EQ(decode.ops[0].bytes, 2e6);
  const std::string table = FormatOpTable(prefill);
  // moe: 36 MB in 6 ms = 6 GB/s, 1 GFLOP in 6 ms = 166.67 GFLOP/s, 60 % of the forward.
  EXPECT_NE(table.find("60.0%"), std::string::npos) << table;
  EXPECT_NE(table.find("6.00"), std::string::npos) << table;
  EXPECT_NE(table.find("166.67"), std::string::npos) << table;
  EXPECT_FALSE(SummarizeForwards((dir / "missing.json").string(), 1).ok());
  std::ofstream(dir / "bad.json") << "{\"not\": \"a trace\"}";
  EXPECT_EQ(SummarizeForwards((dir / "bad.json").string(), 1).status().code(),
            StatusCode::kDataLoss);
}

// What one call site costs (docs/profiling.md "Costs"): off (one relaxed load
// and a branch), a recorded span (two clock reads and a ring write) and an
// instant.  Timing, so disabled by default:
//   profile_test --gtest_also_run_disabled_tests --gtest_filter=*Timing*
TEST(ProfileCost, DISABLED_Timing) {
  constexpr int kN = 2'000'000;
  auto time_ns = [](auto&& body) {
    const int64_t t0 = NowNs();
    for (int i = 0; i < kN; ++i) body(i);
    return static_cast<double>(NowNs() - t0) / kN;
  };
  const double off = time_ns([](int i) {
    Span s(kKernel, "test", "off");
    if (s) s.Arg("i", i);
  });
  const fs::path dir = TempDir("timing");
  SessionOptions o = Options(dir, kKernel);
  o.ring_events = 1 << 16;
  o.flush_interval_ms = 1;
  ASSERT_TRUE(StartSession(o).ok());
  const double span = time_ns([](int i) {
    Span s(kKernel, "test", "on");
    if (s) s.Arg("i", i).Arg("bytes", 1024).Arg("flops", 2048);
  });
  const double instant = time_ns([](int i) { Instant(kKernel, "test", "i", {{"i", i}}); });
  const Result<SessionSummary> s = StopSession();
  ASSERT_TRUE(s.ok());
  std::printf(
      "per call: off %.2f ns, span with 3 args %.1f ns, instant %.1f ns; "
      "%lld written, %lld dropped (the flusher is what bounds a flood)\n",
      off, span, instant, static_cast<long long>(s->events),
      static_cast<long long>(s->dropped_events));
}

}  // namespace
}  // namespace dsv4::profile
