// Prefix caching end to end on tiny-a (block 128, window 16, compression
// blocks 4 and 128), through the real scheduler, executor and MTP proposer
// (docs/engine.md §7.2): a request served from the cache gives exactly the
// tokens and log-probabilities (top 5 per token, which depend on every logit
// of the row) of the same request on a cold engine with prefix caching off —
// greedy and seeded sampling with penalties, MTP K = 0..3, prefill chunks of
// 1, 7, 128 and the whole prompt, hits at the prompt boundary and at decode
// page boundaries (multi-turn chat), identical prompts submitted together
// (n > 1), and preemption under a tiny cache.  Off, no plan carries a
// snapshot field and nothing is counted.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <vector>

#include "runner_test_util.h"

namespace dsv4::testing {
namespace {

struct Out {
  std::vector<int32_t> tokens;
  std::vector<engine::TokenLogprob> logprobs;
  engine::FinishReason reason = engine::FinishReason::kNone;
  int64_t cached = -1;
  // (position of the step's first row, drafts verified) of every decode step
  // with drafts: equal drafts mean an equal MTP state (outputs do not show it).
  std::vector<std::pair<int64_t, std::vector<int32_t>>> drafts;
};

struct PlanCounts {
  int64_t restores = 0;
  int64_t saves = 0;
};

// One engine kept across phases (the cache survives between them).
class Engine {
 public:
  explicit Engine(const launch::EngineOptions& options, int64_t budget = 256 << 20) {
    Result<launch::EngineParts> parts =
        launch::BuildEngine(TinyModel(), TestPool(), options, budget);
    EXPECT_TRUE(parts.ok()) << parts.status().ToString();
    if (parts.ok()) parts_ = std::move(parts).value();
  }

  // Submits `reqs` together and steps until all are finished.
  std::map<engine::RequestId, Out> Run(const std::vector<engine::Request>& reqs) {
    std::map<engine::RequestId, Out> done;
    if (parts_.core == nullptr) return done;
    engine::EngineCore& core = *parts_.core;
    for (const engine::Request& r : reqs) {
      const Status s = core.AddRequest(r);
      EXPECT_TRUE(s.ok()) << s.ToString();
    }
    for (int64_t step = 0; core.HasUnfinished(); ++step) {
      engine::StepRecord record;
      Result<std::vector<engine::RequestOutput>> out = core.Step(&record);
      EXPECT_TRUE(out.ok()) << out.status().ToString();
      if (!out.ok() || step > 100000) {
        ADD_FAILURE() << "no progress";
        break;
      }
      for (size_t i = 0; i < record.plan.requests.size(); ++i) {
        const engine::ScheduledRequest& e = record.plan.requests[i];
        counts_.restores += e.restore_snapshot >= 0 ? 1 : 0;
        counts_.saves += e.save_snapshot >= 0 ? 1 : 0;
        for (const engine::RequestResult& r : record.result.requests) {
          if (r.id == e.id && !r.drafts.empty())
            done[e.id].drafts.emplace_back(e.start_pos, r.drafts);
        }
      }
      for (engine::RequestOutput& o : *out) {
        Out& f = done[o.id];
        EXPECT_TRUE(o.error.ok()) << "request " << o.id << ": " << o.error.ToString();
        f.tokens.insert(f.tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
        f.logprobs.insert(f.logprobs.end(), o.logprobs.begin(), o.logprobs.end());
        f.reason = o.finish;
        if (f.cached >= 0) {
          EXPECT_EQ(f.cached, o.num_cached_tokens) << "request " << o.id;
        }
        f.cached = o.num_cached_tokens;
      }
      const Status inv = core.scheduler().CheckInvariants();
      EXPECT_TRUE(inv.ok()) << inv.ToString();
    }
    return done;
  }

  const engine::SchedulerStats& stats() const { return parts_.core->scheduler().stats(); }
  const PlanCounts& counts() const { return counts_; }
  const launch::EngineParts& parts() const { return parts_; }

 private:
  launch::EngineParts parts_;
  PlanCounts counts_;
};

launch::EngineOptions Options(int32_t k, int64_t chunk, bool prefix_caching = true) {
  launch::EngineOptions o = TestOptions(k);
  o.enable_prefix_caching = prefix_caching;
  if (chunk > 0) {
    o.long_prefill_token_threshold = chunk;
    o.max_num_batched_tokens = std::max<int64_t>(chunk, 64);
  } else {  // whole prompts in one chunk
    o.long_prefill_token_threshold = 0;
    o.max_num_batched_tokens = 512;
  }
  return o;
}

std::vector<int32_t> Tokens(int64_t n, uint64_t seed) {
  std::vector<int32_t> t;
  const auto vocab = static_cast<uint64_t>(TinyModel().config().vocab_size);
  uint64_t x = 0x9e3779b97f4a7c15ull ^ (seed * 0x100000001b3ull);
  for (int64_t i = 0; i < n; ++i) {
    x = x * 6364136223846793005ull + 1442695040888963407ull;
    t.push_back(static_cast<int32_t>((x >> 33) % vocab));
  }
  return t;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

engine::Request MakeRequest(engine::RequestId id, std::vector<int32_t> prompt, int64_t max_tokens,
                            bool sampled = false, uint64_t seed = 7) {
  engine::Request r;
  r.id = id;
  r.prompt = std::move(prompt);
  r.max_tokens = max_tokens;
  r.sampling.logprobs = 5;
  if (sampled) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 32;
    r.sampling.repetition_penalty = 1.2f;  // reads the prompt: the hit's prefix tokens too
    r.sampling.seed = seed;
  }
  return r;
}

bool SameBits(float a, float b) { return std::memcmp(&a, &b, sizeof(float)) == 0; }

void ExpectSame(const Out& want, const Out& got, const std::string& what) {
  EXPECT_EQ(got.tokens, want.tokens) << what;
  EXPECT_EQ(got.reason, want.reason) << what;
  ASSERT_EQ(got.logprobs.size(), want.logprobs.size()) << what;
  for (size_t i = 0; i < want.logprobs.size(); ++i) {
    const engine::TokenLogprob& w = want.logprobs[i];
    const engine::TokenLogprob& g = got.logprobs[i];
    EXPECT_TRUE(SameBits(w.logprob, g.logprob)) << what << " token " << i;
    ASSERT_EQ(w.top.size(), g.top.size()) << what;
    for (size_t j = 0; j < w.top.size(); ++j) {
      EXPECT_EQ(w.top[j].first, g.top[j].first) << what << " token " << i;
      EXPECT_TRUE(SameBits(w.top[j].second, g.top[j].second)) << what << " token " << i;
    }
  }
}

// Every decode step of `got` with drafts matches a step of `cold` at the
// same position whose drafts start with the same ones (with prefix caching a
// step that would cross a page boundary carries fewer drafts, §7.2; when
// they are all accepted the next step starts on the boundary, where the cold
// run, whose step went on past it, has none: only there may one be missing).
void ExpectSameDrafts(const Out& cold, const Out& got, const std::string& what) {
  constexpr int64_t kPage = 128;  // tiny-a's block
  std::map<int64_t, std::vector<int32_t>> at(cold.drafts.begin(), cold.drafts.end());
  for (const auto& [pos, d] : got.drafts) {
    auto it = at.find(pos);
    if (it == at.end() && pos % kPage == 0) continue;
    ASSERT_NE(it, at.end()) << what << ": no cold step at " << pos;
    ASSERT_LE(d.size(), it->second.size()) << what << " at " << pos;
    EXPECT_TRUE(std::equal(d.begin(), d.end(), it->second.begin()))
        << what << ": drafts differ at " << pos;
  }
  EXPECT_FALSE(got.drafts.empty()) << what;
}

// The request alone on a fresh engine with prefix caching off.
Out Cold(const engine::Request& r, int32_t k = 0) {
  Engine cold(Options(k, 0, /*prefix_caching=*/false));
  return cold.Run({r}).at(r.id);
}

// A writer computes a 300-token prompt (snapshot at L = 256); then a prompt
// sharing 270 of its tokens and the same prompt again hit at 256 and
// continue across the 16-token window and the 4-token blocks.
TEST(PrefixCacheTest, HitAtPromptBoundaryEqualsColdRun) {
  const std::vector<int32_t> a = Tokens(300, 1);
  const engine::Request writer = MakeRequest(1, a, 8);
  std::vector<int32_t> b(a.begin(), a.begin() + 270);
  b = Concat(b, Tokens(40, 2));
  const engine::Request other = MakeRequest(2, b, 12);
  const engine::Request again = MakeRequest(3, a, 10);
  // Decodes from 260: its MTP window still holds row 255, the pending row
  // the hit resumed from (a wrong one changes these drafts).
  std::vector<int32_t> c(a.begin(), a.begin() + 258);
  const engine::Request near = MakeRequest(4, Concat(c, Tokens(2, 9)), 10);
  const Out want1 = Cold(writer), want2 = Cold(other), want3 = Cold(again), want4 = Cold(near);
  for (int32_t k : {0, 1, 2, 3}) {
    // Decode steps (and so their drafts) follow from the output alone.
    const Out drafts2 = Cold(other, k), drafts3 = Cold(again, k), drafts4 = Cold(near, k);
    for (int64_t chunk : {1, 7, 128, 0}) {
      const std::string what = "K=" + std::to_string(k) + " chunk=" + std::to_string(chunk);
      Engine warm(Options(k, chunk));
      const auto first = warm.Run({writer});
      ExpectSame(want1, first.at(1), what + " writer");
      EXPECT_EQ(first.at(1).cached, 0) << what;
      const auto second = warm.Run({other, again, near});
      ExpectSame(want2, second.at(2), what + " hit with another tail");
      ExpectSame(want3, second.at(3), what + " hit with the same prompt");
      EXPECT_EQ(second.at(2).cached, 256) << what;
      EXPECT_EQ(second.at(3).cached, 256) << what;
      ExpectSame(want4, second.at(4), what + " hit 4 tokens before the prompt's end");
      EXPECT_EQ(second.at(4).cached, 256) << what;
      EXPECT_EQ(warm.stats().prefix_cache_hits, 3 * 256) << what;
      EXPECT_EQ(warm.stats().prefix_cache_queries, 300 + 310 + 300 + 260) << what;
      EXPECT_EQ(warm.counts().restores, 3) << what;
      // The MTP proposer resumed where the writer's state was: same drafts.
      if (k > 0) {
        ExpectSameDrafts(drafts2, second.at(2), what + " drafts");
        ExpectSameDrafts(drafts3, second.at(3), what + " drafts");
        ExpectSameDrafts(drafts4, second.at(4), what + " drafts");
      }
    }
  }
}

// Multi-turn chat: turn t + 1 = turn t's prompt + its answer + a new message.
// Answers cross page boundaries while decoding (snapshots at 128, 256, 384,
// published when the turn finishes), so later turns hit there.
void MultiTurn(int32_t k, bool sampled) {
  const std::string what = std::string(sampled ? "sampled" : "greedy") + " K=" + std::to_string(k);
  Engine warm(Options(k, 0));
  std::vector<int32_t> prompt = Tokens(100, 3);
  const int64_t want_cached[] = {0, 128, 128, 256, 384};
  for (int turn = 0; turn < 5; ++turn) {
    const engine::Request r = MakeRequest(10 + turn, prompt, 60, sampled, 11 + turn);
    const Out got = warm.Run({r}).at(r.id);
    ExpectSame(Cold(r), got, what + " turn " + std::to_string(turn + 1));
    if (k > 0) ExpectSameDrafts(Cold(r, k), got, what + " turn " + std::to_string(turn + 1));
    EXPECT_EQ(got.cached, want_cached[turn]) << what << " turn " << turn + 1;
    ASSERT_EQ(got.tokens.size(), 60u) << what;
    prompt = Concat(Concat(prompt, got.tokens), Tokens(17, 20 + turn));
  }
  // Decode boundaries 128, 256 and 384 at least (K > 0: also attempts whose
  // drafts were rejected).
  EXPECT_GE(warm.counts().saves, 3) << what;
}

TEST(PrefixCacheTest, MultiTurnGreedyHitsDecodeBoundaries) {
  for (int32_t k : {0, 1, 3}) MultiTurn(k, false);
}

TEST(PrefixCacheTest, MultiTurnSeededSamplingHitsDecodeBoundaries) {
  for (int32_t k : {0, 2}) MultiTurn(k, true);
}

// n > 1 choices (identical prompts submitted together): the first computes
// the prompt, the others wait for its boundary and share its pages (also
// with --dp 2).
TEST(PrefixCacheTest, ChoicesShareThePrompt) {
  const std::vector<int32_t> a = Tokens(300, 4);
  std::vector<engine::Request> reqs;
  for (int i = 0; i < 3; ++i) reqs.push_back(MakeRequest(20 + i, a, 12, true, 100 + i));
  // dp = 2: the hit is in the writer's partition, which admission prefers
  // to the less loaded one.
  for (int32_t dp : {1, 2}) {
    for (int32_t k : {0, 1}) {
      launch::EngineOptions o = Options(k, 128);
      o.dp = dp;
      Engine warm(o);
      const auto got = warm.Run(reqs);
      int64_t hits = 0;
      for (const engine::Request& r : reqs) {
        ExpectSame(Cold(r), got.at(r.id), "choice " + std::to_string(r.id));
        hits += got.at(r.id).cached == 256 ? 1 : 0;
      }
      EXPECT_EQ(got.at(20).cached, 0);
      EXPECT_EQ(hits, 2) << "K=" << k << " dp=" << dp;
    }
  }
}

// Requests sharing a 256-token prefix under caches of 4 runner slots and
// 1.25 to 2 max-length histories: preemptions occur, victims and newcomers
// hit what others (or they themselves) published, outputs equal cold runs.
TEST(PrefixCacheTest, PreemptionKeepsPagesHittable) {
  const std::vector<int32_t> common = Tokens(256, 5);
  std::vector<engine::Request> reqs;
  for (int i = 0; i < 8; ++i) {
    reqs.push_back(MakeRequest(30 + i, Concat(common, Tokens(60 + 23 * i, 40 + i)), 60));
  }
  std::vector<Out> want;
  for (const engine::Request& r : reqs) want.push_back(Cold(r));
  for (int32_t k : {0, 2}) {
    launch::EngineOptions o = Options(k, 96);
    Engine probe(o);
    const cache::CapacityPlan& plan = probe.parts().plan;
    const int64_t history = plan.bytes_per_slot - plan.ring_bytes_per_request;
    int64_t preemptions = 0;
    for (int64_t quarters : {5, 8}) {
      Engine warm(o, 4 * plan.ring_bytes_per_request + history * quarters / 4);
      // A writer first, so that every later request can hit.
      const auto first = warm.Run({reqs[0]});
      ExpectSame(want[0], first.at(reqs[0].id), "writer");
      const auto got = warm.Run(std::vector<engine::Request>(reqs.begin() + 1, reqs.end()));
      for (size_t i = 1; i < reqs.size(); ++i) {
        ExpectSame(want[i], got.at(reqs[i].id), "request " + std::to_string(reqs[i].id));
      }
      preemptions += warm.parts().core->scheduler().stats().num_preemptions;
      EXPECT_GE(warm.stats().prefix_cache_hits, 7 * 256) << "K=" << k;
      std::printf("K=%d, %lld/4 histories: %lld preemptions, %lld of %lld tokens hit\n", k,
                  static_cast<long long>(quarters),
                  static_cast<long long>(warm.parts().core->scheduler().stats().num_preemptions),
                  static_cast<long long>(warm.stats().prefix_cache_hits),
                  static_cast<long long>(warm.stats().prefix_cache_queries));
    }
    EXPECT_GT(preemptions, 0) << "K=" << k;
  }
}

// Off: nothing is matched, counted, saved or restored, and outputs equal.
TEST(PrefixCacheTest, OffDoesNothing) {
  const std::vector<int32_t> a = Tokens(300, 6);
  const engine::Request r1 = MakeRequest(1, a, 8), r2 = MakeRequest(2, a, 8);
  Engine off(Options(1, 128, false));
  off.Run({r1});
  const Out got = off.Run({r2}).at(2);
  ExpectSame(Cold(r2), got, "off");
  EXPECT_EQ(got.cached, 0);
  EXPECT_EQ(off.stats().prefix_cache_queries, 0);
  EXPECT_EQ(off.stats().prefix_cache_hits, 0);
  EXPECT_EQ(off.counts().saves, 0);
  EXPECT_EQ(off.counts().restores, 0);
  EXPECT_EQ(off.parts().plan.num_snapshots, 0);
}

}  // namespace
}  // namespace dsv4::testing
