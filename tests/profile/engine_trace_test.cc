// The e2e level over the engine thread (engine/local_engine.h) and the fake
// executor: every request submitted during a session appears as one async
// track closed with its finish reason, its phases balance, and every engine
// step is a span whose schedule / execute / commit children nest inside it
// with batch arguments that add up to what the requests did.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "base/mutex.h"
#include "engine/local_engine.h"
#include "harness.h"
#include "profile/profile.h"
#include "profile/session.h"

namespace dsv4::testing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int64_t kPromptLen = 5;
int32_t PromptToken(int64_t pos) { return 2 + static_cast<int32_t>(pos * 3); }

struct Seen {
  engine::FinishReason finish = engine::FinishReason::kNone;
  int64_t tokens = 0;
  int64_t accepted = 0;
  int64_t drafts = 0;
};

class Outputs {
 public:
  engine::AsyncEngine::OutputCallback Callback() {
    return [this](const engine::GenerationOutput& o) {
      MutexLock lock(&mu_);
      Seen& s = seen_[o.id];
      s.tokens += static_cast<int64_t>(o.new_tokens.size());
      s.accepted += o.num_accepted_tokens;
      s.drafts += o.num_draft_tokens;
      s.finish = o.finish;
      if (o.finish != engine::FinishReason::kNone) {
        ++finished_;
        cv_.SignalAll();
      }
    };
  }
  void Wait(int64_t n) {
    MutexLock lock(&mu_);
    cv_.Wait(&mu_, [&]() REQUIRES(mu_) { return finished_ >= n; });
  }
  std::map<engine::RequestId, Seen> seen() {
    MutexLock lock(&mu_);
    return seen_;
  }

 private:
  Mutex mu_;
  CondVar cv_;
  std::map<engine::RequestId, Seen> seen_ GUARDED_BY(mu_);
  int64_t finished_ GUARDED_BY(mu_) = 0;
};

std::unique_ptr<engine::LocalEngine> StartEngine() {
  engine::SchedulerConfig c;
  c.max_num_batched_tokens = 16;  // several steps per prompt batch: chunks
  c.max_num_seqs = 4;
  c.max_model_len = 128;
  c.prefill_tile = 1;
  c.num_speculative_tokens = 2;
  Result<std::unique_ptr<engine::Scheduler>> scheduler =
      engine::Scheduler::Create(c, TinyCache(1, 64, 64));
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  auto fake = std::make_unique<FakeExecutor>((*scheduler)->cache(),
                                             [](engine::RequestId id, int64_t pos) {
                                               return pos < kPromptLen ? PromptToken(pos)
                                                                       : FakeModelToken(id, pos, 0);
                                             },
                                             60);
  engine::LocalEngineParts parts;
  parts.executor = std::move(fake);
  parts.core =
      std::make_unique<engine::EngineCore>(std::move(scheduler).value(), parts.executor.get());
  engine::LocalEngineConfig config;
  config.vocab_size = 50000;
  config.eos_token_id = -1;
  config.max_model_len = 128;
  Result<std::unique_ptr<engine::LocalEngine>> engine =
      engine::LocalEngine::Start(std::move(config), std::move(parts));
  EXPECT_TRUE(engine.ok()) << engine.status().ToString();
  return std::move(engine).value();
}

engine::GenerationRequest MakeRequest(int64_t max_tokens) {
  engine::GenerationRequest r;
  for (int64_t p = 0; p < kPromptLen; ++p) r.prompt.push_back(PromptToken(p));
  r.max_tokens = max_tokens;
  return r;
}

TEST(EngineTrace, EveryRequestHasItsTrackAndEveryStepItsChildren) {
  const fs::path dir =
      fs::temp_directory_path() / ("dsv4_engine_trace_" + std::to_string(::getpid()));
  fs::remove_all(dir);
  profile::SessionOptions o;
  o.levels = profile::kE2e | profile::kVerbose;
  o.path = (dir / "trace.json").string();
  ASSERT_TRUE(profile::StartSession(o).ok());

  std::unique_ptr<engine::LocalEngine> engine = StartEngine();
  Outputs out;
  constexpr int kRequests = 10;
  std::vector<engine::RequestId> ids;
  for (int i = 0; i < kRequests; ++i) {
    Result<engine::RequestId> id = engine->Submit(MakeRequest(3 + i), out.Callback());
    ASSERT_TRUE(id.ok());
    ids.push_back(*id);
  }
  engine->Abort(ids.back());  // one abort: "abort", whenever it lands
  out.Wait(kRequests);
  engine->Shutdown();
  const Result<profile::SessionSummary> summary = profile::StopSession();
  ASSERT_TRUE(summary.ok()) << summary.status().ToString();
  EXPECT_EQ(summary->dropped_events, 0);

  std::ifstream in(summary->path);
  const json trace = json::parse(in);
  const std::map<engine::RequestId, Seen> seen = out.seen();

  // Per request track: balanced nested phases, one closing event with the
  // finish reason the caller saw.
  std::map<uint64_t, std::vector<std::string>> open;
  std::map<uint64_t, std::string> finish;
  std::map<uint64_t, int64_t> output_tokens;
  int64_t chunks = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") != "b" && e.at("ph") != "e") continue;
    ASSERT_EQ(e.at("cat"), "request");
    const uint64_t id = e.at("id");
    std::vector<std::string>& stack = open[id];
    if (e.at("ph") == "b") {
      if (stack.empty()) {
        EXPECT_EQ(e.at("name"), "request");
      }
      chunks += e.at("name") == "chunk";
      stack.push_back(e.at("name"));
      continue;
    }
    ASSERT_FALSE(stack.empty()) << "end without begin on request " << id;
    EXPECT_EQ(stack.back(), e.at("name")) << "request " << id;
    stack.pop_back();
    if (e.at("name") == "request") {
      EXPECT_TRUE(stack.empty());
      finish[id] = e.at("args").at("finish_reason");
      output_tokens[id] = e.at("args").at("output_tokens");
    }
  }
  for (engine::RequestId id : ids) {
    const auto track = static_cast<uint64_t>(id);
    ASSERT_TRUE(finish.count(track)) << "request " << id << " missing from the trace";
    EXPECT_EQ(finish[track], engine::FinishReasonName(seen.at(id).finish)) << id;
    EXPECT_EQ(output_tokens[track], seen.at(id).tokens) << id;
    EXPECT_TRUE(open[track].empty()) << id;
  }
  EXPECT_GT(chunks, 0);

  // Steps: children inside their step, batch arguments add up.
  struct Span {
    double begin, end;
  };
  std::vector<Span> steps;
  std::map<std::string, std::vector<Span>> children;
  int64_t prefill_rows = 0, accepted = 0, drafts = 0;
  int admits = 0;
  for (const json& e : trace.at("traceEvents")) {
    if (e.at("ph") == "i" && e.at("name") == "admit") ++admits;
    if (e.at("ph") != "X") continue;
    const Span s{e.at("ts").get<double>(), e.at("ts").get<double>() + e.at("dur").get<double>()};
    if (e.at("name") == "step") {
      steps.push_back(s);
      prefill_rows += e.at("args").at("prefill_rows").get<int64_t>();
      accepted += e.at("args").at("accepted").get<int64_t>();
      drafts += e.at("args").at("drafts").get<int64_t>();
    } else {
      children[e.at("name")].push_back(s);
    }
  }
  ASSERT_FALSE(steps.empty());
  for (const char* name : {"schedule", "execute", "commit"}) {
    ASSERT_FALSE(children[name].empty()) << name;
    for (const Span& c : children[name]) {
      bool inside = false;
      for (const Span& s : steps) inside |= c.begin >= s.begin && c.end <= s.end;
      EXPECT_TRUE(inside) << name << " at " << c.begin << " is in no step";
    }
  }
  int64_t seen_accepted = 0, seen_drafts = 0;
  for (const auto& [id, s] : seen) {
    seen_accepted += s.accepted;
    seen_drafts += s.drafts;
  }
  EXPECT_EQ(accepted, seen_accepted);
  EXPECT_EQ(drafts, seen_drafts);
  // Every prompt row was computed once (no preemption with this cache),
  // except the aborted request's rows if it was aborted mid-prefill.
  EXPECT_LE(prefill_rows, kRequests * kPromptLen);
  EXPECT_GE(prefill_rows, (kRequests - 1) * kPromptLen);
  EXPECT_GE(admits, kRequests - 1);  // verbose: scheduler decisions
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::testing
