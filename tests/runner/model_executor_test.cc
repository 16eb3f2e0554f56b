// The model runner on tiny-a: greedy output with MTP (K = 1, 2, 3, 5) is
// identical to greedy output without it; continuous batching equals one
// request at a time; preemption under a tiny cache changes nothing; drafts
// that are partly right (an oracle proposer) roll back exactly; the model
// cache is what the capacity plan priced, and requests run on each other's
// freed pages.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <set>
#include <span>
#include <string>

#include "runner_test_util.h"
#include "sampling/token_distribution.h"

namespace dsv4::testing {
namespace {

std::vector<engine::Request> MakeRequests(int64_t n, int64_t max_tokens, int64_t first = 0) {
  std::vector<engine::Request> reqs;
  const int64_t vocab = TinyModel().config().vocab_size;
  for (int64_t i = 0; i < n; ++i) {
    engine::Request r;
    r.id = i + 1;
    r.prompt = TestPrompt(first + i, vocab);
    r.max_tokens = max_tokens + (i % 5) * 3;  // mixed output lengths
    reqs.push_back(std::move(r));
  }
  return reqs;
}

void ExpectSame(const std::map<engine::RequestId, Finished>& want,
                const std::map<engine::RequestId, Finished>& got, const char* what) {
  ASSERT_EQ(want.size(), got.size()) << what;
  for (const auto& [id, w] : want) {
    const Finished& g = got.at(id);
    EXPECT_EQ(g.tokens, w.tokens) << what << ": request " << id;
    EXPECT_EQ(g.reason, w.reason) << what << ": request " << id;
  }
}

void PrintSpec(int32_t k, const RunStats& s) {
  std::printf(
      "K=%d: %lld steps, %lld verify steps, %lld/%lld drafts accepted, mean accepted "
      "length %.3f, per position:",
      k, static_cast<long long>(s.num_steps), static_cast<long long>(s.spec.num_verify_steps),
      static_cast<long long>(s.spec.num_accepted_tokens),
      static_cast<long long>(s.spec.num_draft_tokens), s.spec.MeanAcceptedLength());
  for (int64_t a : s.spec.accepted_per_pos) std::printf(" %lld", static_cast<long long>(a));
  std::printf("\n");
}

TEST(ModelExecutorTest, GreedyMtpEqualsPlain) {
  const std::vector<engine::Request> reqs = MakeRequests(50, 10);
  RunStats base_stats;
  const auto want = RunToCompletion(TestOptions(0), reqs, 0, 1, &base_stats);
  ASSERT_EQ(want.size(), reqs.size());
  for (int32_t k : {1, 2, 3, 5}) {
    RunStats stats;
    const auto got = RunToCompletion(TestOptions(k), reqs, 0, 1, &stats);
    ExpectSame(want, got, "MTP vs plain");
    PrintSpec(k, stats);
    EXPECT_GT(stats.spec.num_draft_tokens, 0);
  }
}

// Proposes the true continuation (from a reference run), each draft right
// with probability percent / 100 (a hash of request, position and draft
// index), so steps accept 0..K drafts; checks every update it is given.
class OracleProposer : public speculation::DraftProposer {
 public:
  OracleProposer(std::map<engine::RequestId, std::vector<int32_t>> truth, int32_t k, int percent,
                 int64_t vocab, int64_t* errors)
      : truth_(std::move(truth)), k_(k), percent_(percent), vocab_(vocab), errors_(errors) {}

  int32_t max_drafts() const override { return k_; }
  void AllocateState(int64_t slot, engine::RequestId id,
                     const speculation::DraftSampling&) override {
    state_[slot] = {id, {}};
  }
  void FreeState(int64_t slot) override { state_.erase(slot); }
  std::span<const int32_t> Propose(int64_t slot) const override {
    const auto& d = state_.at(slot).drafts;
    return {d.data(), d.size()};
  }
  Status AfterVerify(const model::ForwardBatch&, const bf16*,
                     std::span<const speculation::DraftUpdate> updates) override {
    for (const speculation::DraftUpdate& u : updates) {
      State& st = state_.at(u.slot);
      const std::vector<int32_t>& truth = truth_.at(st.id);
      for (size_t i = 0; i < u.tokens.size(); ++i) {
        const size_t pos = static_cast<size_t>(u.start_pos) + i;
        if (pos >= truth.size() || truth[pos] != u.tokens[i]) ++*errors_;
      }
      if (u.tokens.size() != static_cast<size_t>(u.num_true_rows) + (u.committed ? 1 : 0)) {
        ++*errors_;
      }
      st.drafts.clear();
      if (!u.committed) continue;
      const int64_t p = u.start_pos + u.num_true_rows;  // the committed token's position
      for (int32_t j = 0; j < k_; ++j) {
        const int64_t pos = p + 1 + j;
        int32_t t = pos < static_cast<int64_t>(truth.size()) ? truth[static_cast<size_t>(pos)] : 0;
        const uint64_t h = (static_cast<uint64_t>(st.id) * 1000003u +
                            static_cast<uint64_t>(pos) * 8191u + static_cast<uint64_t>(j) * 131u) %
                           1009u;
        if (h % 100 >= static_cast<uint64_t>(percent_)) t = static_cast<int32_t>((t + 1) % vocab_);
        st.drafts.push_back(t);
      }
    }
    return Status::Ok();
  }

 private:
  struct State {
    engine::RequestId id = 0;
    std::vector<int32_t> drafts;
  };
  std::map<engine::RequestId, std::vector<int32_t>> truth_;
  int32_t k_;
  int percent_;
  int64_t vocab_;
  int64_t* errors_;
  std::map<int64_t, State> state_;
};

std::map<engine::RequestId, std::vector<int32_t>> Truth(
    const std::vector<engine::Request>& reqs, const std::map<engine::RequestId, Finished>& out) {
  std::map<engine::RequestId, std::vector<int32_t>> truth;
  for (const engine::Request& r : reqs) {
    std::vector<int32_t> t = r.prompt;
    const auto& o = out.at(r.id).tokens;
    t.insert(t.end(), o.begin(), o.end());
    truth[r.id] = std::move(t);
  }
  return truth;
}

// Partly right drafts: every acceptance length occurs, and the rejected
// rows (across window, compression blocks and state pages) leave no trace.
TEST(ModelExecutorTest, PartlyRightDraftsRollBackExactly) {
  const std::vector<engine::Request> reqs = MakeRequests(20, 16, 5);
  const auto want = RunToCompletion(TestOptions(0), reqs);
  const int64_t vocab = TinyModel().config().vocab_size;
  for (int32_t k : {1, 3, 5}) {
    int64_t errors = 0;
    RunStats stats;
    const auto got =
        RunToCompletion(TestOptions(k), reqs, 0, 2, &stats,
                        std::make_unique<OracleProposer>(Truth(reqs, want), k, 75, vocab, &errors));
    ExpectSame(want, got, "oracle drafts");
    EXPECT_EQ(errors, 0) << "draft updates disagree with the true tokens";
    PrintSpec(k, stats);
    ASSERT_EQ(stats.spec.accepted_per_pos.size(), static_cast<size_t>(k));
    EXPECT_GT(stats.spec.accepted_per_pos[static_cast<size_t>(k - 1)], 0);   // all accepted
    EXPECT_LT(stats.spec.num_accepted_tokens, stats.spec.num_draft_tokens);  // and rejections
    // Fewer steps than tokens: speculation pays.
    EXPECT_GT(stats.spec.MeanAcceptedLength(), 1.5);
  }
}

// Seeded sampling (temperature, top-k) through MTP and through partly right
// oracle drafts: the counter-based streams make the output identical to
// plain sampled decoding.
TEST(ModelExecutorTest, SeededSampledOutputIndependentOfSpeculation) {
  std::vector<engine::Request> reqs = MakeRequests(16, 12, 2);
  for (engine::Request& r : reqs) {
    r.sampling.temperature = 0.8f;
    r.sampling.top_k = 32;
    r.sampling.seed = 42 + static_cast<uint64_t>(r.id);
  }
  const auto want = RunToCompletion(TestOptions(0), reqs);
  ExpectSame(want, RunToCompletion(TestOptions(3), reqs, 0, 1), "sampled, MTP K=3");
  int64_t errors = 0;
  RunStats stats;
  const auto got =
      RunToCompletion(TestOptions(3), reqs, 0, 1, &stats,
                      std::make_unique<OracleProposer>(Truth(reqs, want), 3, 75,
                                                       TinyModel().config().vocab_size, &errors));
  ExpectSame(want, got, "sampled, oracle K=3");
  EXPECT_EQ(errors, 0);
  EXPECT_GT(stats.spec.num_accepted_tokens, 0);
  // Another seed changes the output (the seed is honoured).
  std::vector<engine::Request> other = reqs;
  for (engine::Request& r : other) r.sampling.seed = 7 + static_cast<uint64_t>(r.id);
  const auto diff = RunToCompletion(TestOptions(0), other);
  int64_t num_same = 0;
  for (const auto& [id, f] : want) num_same += diff.at(id).tokens == f.tokens ? 1 : 0;
  EXPECT_LT(num_same, 4);
}

TEST(ModelExecutorTest, ContinuousBatchingEqualsOneAtATime) {
  const std::vector<engine::Request> reqs = MakeRequests(14, 8);
  launch::EngineOptions one = TestOptions(0);
  one.max_num_seqs = 1;
  const auto want = RunToCompletion(one, reqs);
  launch::EngineOptions many = TestOptions(2);
  many.max_num_batched_tokens = 64;  // many chunked prefills next to decodes
  many.long_prefill_token_threshold = 40;
  ExpectSame(want, RunToCompletion(many, reqs), "batched K=2 vs one at a time");
  many.dp = 2;  // two partitions: slots map to distinct model cache slots
  many.max_num_seqs = 4;
  ExpectSame(want, RunToCompletion(many, reqs, 0, 1), "dp=2 K=2 vs one at a time");
}

TEST(ModelExecutorTest, PreemptionUnderTinyCacheChangesNothing) {
  std::vector<engine::Request> reqs = MakeRequests(10, 16, 8);
  const auto want = RunToCompletion(TestOptions(0), reqs);
  for (int32_t k : {0, 2}) {
    launch::EngineOptions o = TestOptions(k);
    // Off: the budget below leaves room for more running requests than
    // histories (with snapshots charged per slot, fewer slots would fit);
    // preemption with prefix caching on is runner_prefix_test's.
    o.enable_prefix_caching = false;
    Result<launch::EngineParts> probe = launch::BuildEngine(TinyModel(), TestPool(), o, 256 << 20);
    ASSERT_TRUE(probe.ok());
    // Room for ~2 max-length requests while 8 long ones run: preemption.
    const int64_t budget = probe->plan.bytes_per_slot * 2 + probe->plan.bytes_per_slot / 2;
    RunStats stats;
    const auto got = RunToCompletion(o, reqs, budget, 0, &stats);
    ExpectSame(want, got, "tiny cache");
    EXPECT_GT(stats.num_preemptions, 0) << "K=" << k;
    std::printf("K=%d tiny cache: %lld preemptions in %lld steps\n", k,
                static_cast<long long>(stats.num_preemptions),
                static_cast<long long>(stats.num_steps));
  }
}

// The engine's model cache is exactly what the capacity plan priced: per-slot
// rings and compressor states for the plan's slots, full-history pools of
// the plan's pages, dp partitions; with prefix caching, the executor's
// snapshot buffers are the plan's snapshots.
TEST(ModelExecutorTest, EngineCacheBytesEqualThePlan) {
  for (int32_t k : {0, 2}) {
    for (int32_t dp : {1, 2}) {
      for (bool prefix : {false, true}) {
        launch::EngineOptions o = TestOptions(k);
        o.dp = dp;
        o.enable_prefix_caching = prefix;
        Result<launch::EngineParts> parts =
            launch::BuildEngine(TinyModel(), TestPool(), o, 64 << 20);
        ASSERT_TRUE(parts.ok()) << parts.status().ToString();
        const model::ModelCache& cache = parts->executor->cache();
        const cache::CapacityPlan& plan = parts->plan;
        EXPECT_TRUE(cache.external_pages());
        EXPECT_EQ(cache.num_slots(), dp * plan.num_ring_requests);
        const int64_t snapshots = prefix ? launch::kSnapshotsPerSlot : 0;
        EXPECT_EQ(static_cast<int64_t>(cache.FixedBytesPerSlot()) * (1 + snapshots),
                  plan.ring_bytes_per_request);
        EXPECT_EQ(parts->executor->num_snapshots(), dp * plan.num_ring_requests * snapshots);
        EXPECT_EQ(cache.NumPoolPages(cache::kGroupCmpC4), dp * plan.num_pages[cache::kGroupCmpC4]);
        EXPECT_EQ(cache.NumPoolPages(cache::kGroupCmpC128),
                  dp * plan.num_pages[cache::kGroupCmpC128]);
        EXPECT_EQ(cache.NumPoolPages(cache::kGroupIdx), dp * plan.num_pages[cache::kGroupIdx]);
        EXPECT_EQ(static_cast<int64_t>(cache.AllocatedBytes()) +
                      parts->executor->snapshot_capacity_bytes(),
                  dp * plan.total_bytes)
            << "K=" << k << " dp=" << dp;
        EXPECT_NE(parts->description.find("per-slot rings"), std::string::npos);
        EXPECT_NE(parts->description.find(prefix ? "prefix caching: on" : "prefix caching: off"),
                  std::string::npos);
      }
    }
  }
}

// One runner slot and a history pool of one max-length request: requests run
// one after another on each other's freed pages (rows of a finished request
// still in them), the model's rows lie in the pages of the scheduler's block
// table, and outputs equal a generous one-at-a-time run.
TEST(ModelExecutorTest, SequentialRequestsReuseFreedPages) {
  const std::vector<engine::Request> reqs = MakeRequests(3, 20, 12);  // prompts 255, 260, 163
  launch::EngineOptions one = TestOptions(0);
  one.max_num_seqs = 1;
  const auto want = RunToCompletion(one, reqs);
  const launch::EngineOptions o = TestOptions(2);
  Result<launch::EngineParts> probe = launch::BuildEngine(TinyModel(), TestPool(), o, 256 << 20);
  ASSERT_TRUE(probe.ok());
  const int64_t budget = probe->plan.bytes_per_slot + probe->plan.bytes_per_slot / 8;
  Result<launch::EngineParts> parts = launch::BuildEngine(TinyModel(), TestPool(), o, budget);
  ASSERT_TRUE(parts.ok()) << parts.status().ToString();
  ASSERT_EQ(parts->plan.num_ring_requests, 1);
  ASSERT_EQ(parts->plan.num_pages[cache::kGroupCmpC4], 4);  // 512 tokens of history
  for (const engine::Request& r : reqs) ASSERT_TRUE(parts->core->AddRequest(r).ok());
  std::map<engine::RequestId, Finished> got;
  std::map<engine::RequestId, std::set<int32_t>> pages;  // cmp_c4 pages each request used
  const model::ModelCache& cache = parts->executor->cache();
  while (parts->core->HasUnfinished()) {
    engine::StepRecord step;
    auto out = parts->core->Step(&step);
    ASSERT_TRUE(out.ok());
    for (const auto& o2 : *out) {
      got[o2.id].tokens.insert(got[o2.id].tokens.end(), o2.new_tokens.begin(), o2.new_tokens.end());
      got[o2.id].reason = o2.finish;
    }
    for (const engine::RequestResult& r : step.result.requests) {
      const engine::RequestId id = r.id;
      const cache::CacheManager& cm = parts->core->scheduler().cache();
      if (!cm.Holds(id)) continue;  // finished in this step
      const std::vector<int32_t>& sched = cm.Tables(id)[cache::kGroupCmpC4].pages;
      for (int64_t l : {2, 4}) {  // the CSA layers
        const model::PagedRows& rows = *cache.layer(l).history(cache::kGroupCmpC4);
        for (int64_t i = 0; i < rows.size(0); ++i) {
          ASSERT_LT(static_cast<size_t>(i / rows.rows_per_page()), sched.size());
          ASSERT_EQ(rows.PageOfRow(0, i), sched[static_cast<size_t>(i / rows.rows_per_page())]);
        }
      }
      pages[id].insert(sched.begin(), sched.end());
    }
  }
  ExpectSame(want, got, "sequential on one slot");
  ASSERT_EQ(pages.size(), 3u);
  auto overlap = [](const std::set<int32_t>& a, const std::set<int32_t>& b) {
    for (int32_t p : a) {
      if (b.count(p) != 0) return true;
    }
    return false;
  };
  EXPECT_TRUE(overlap(pages[1], pages[2]));
  EXPECT_TRUE(overlap(pages[2], pages[3]));
  EXPECT_TRUE(parts->core->scheduler().cache().AllFree());
}

// The MTP drafts are the MTP layer's argmax at the right alignment: draft 1
// from row P - 1 = (h_{P-1}, token_P) over the true window, draft j + 1 from
// the chained row P + j - 1 = (MTP streams of the previous row, draft j).
TEST(ModelExecutorTest, MtpDraftsMatchDirectComputation) {
  const model::Model& m = TinyModel();
  const int64_t vocab = m.config().vocab_size;
  const int32_t k = 3;
  std::vector<engine::Request> reqs = MakeRequests(2, 10, 11);  // prompt lengths 140, 255
  // The second request is sampled: its drafts are coupled (CoupledDraft on
  // the MTP logits, with its params, seed and history).
  reqs[1].sampling.temperature = 0.8f;
  reqs[1].sampling.top_k = 32;
  reqs[1].sampling.frequency_penalty = 0.3f;
  reqs[1].sampling.seed = 5;
  Result<launch::EngineParts> parts = launch::BuildEngine(m, TestPool(), TestOptions(k), 256 << 20);
  ASSERT_TRUE(parts.ok());
  std::map<engine::RequestId, std::vector<std::pair<int64_t, std::vector<int32_t>>>> seen;
  std::map<engine::RequestId, std::vector<int32_t>> outputs;
  for (const engine::Request& r : reqs) ASSERT_TRUE(parts->core->AddRequest(r).ok());
  while (parts->core->HasUnfinished()) {
    engine::StepRecord step;
    auto out = parts->core->Step(&step);
    ASSERT_TRUE(out.ok());
    for (const auto& o : *out) {
      outputs[o.id].insert(outputs[o.id].end(), o.new_tokens.begin(), o.new_tokens.end());
    }
    // Every step's verified drafts travel in its result, next to the plan's rows.
    ASSERT_EQ(step.result.requests.size(), step.plan.requests.size());
    for (size_t i = 0; i < step.result.requests.size(); ++i) {
      const engine::RequestResult& r = step.result.requests[i];
      const engine::ScheduledRequest& e = step.plan.requests[i];
      ASSERT_EQ(r.id, e.id);
      if (r.drafts.empty()) continue;
      EXPECT_EQ(static_cast<int32_t>(r.drafts.size()), e.num_draft);
      for (int32_t a = 0; a < r.num_accepted_drafts; ++a) {
        EXPECT_EQ(r.drafts[static_cast<size_t>(a)], r.tokens[static_cast<size_t>(a)]);
      }
      seen[r.id].push_back({e.start_pos, r.drafts});
    }
  }
  model::Workspace ws;
  sampling::TokenDistribution dist(vocab);
  for (const engine::Request& r : reqs) {
    std::vector<int32_t> full = r.prompt;
    full.insert(full.end(), outputs[r.id].begin(), outputs[r.id].end());
    const auto n = static_cast<int64_t>(full.size());
    auto cache = m.NewCache(1);
    model::ForwardBatch b;
    b.Add(0, 0, full);
    std::vector<bf16> h(static_cast<size_t>(n * m.stream_width()));
    model::ForwardOutputs out;
    out.streams = h.data();
    ASSERT_TRUE(m.Forward(b, *cache, out, ws, TestPool()).ok());
    ASSERT_FALSE(seen[r.id].empty());
    for (const auto& [p, drafts] : seen[r.id]) {
      auto mtp = m.NewCache(1);
      model::ForwardBatch mb;
      mb.Add(0, 0, std::vector<int32_t>(full.begin() + 1, full.begin() + p + 1));
      mb.logit_rows = {p - 1};
      std::vector<float> logits(static_cast<size_t>(vocab));
      std::vector<bf16> s(static_cast<size_t>(p * m.stream_width()));
      // approx_logits: the proposer's draft head (GemmBf16F32Approx).
      model::ForwardOutputs mo{logits.data(), nullptr, s.data(), /*approx_logits=*/true};
      ASSERT_TRUE(m.ForwardMtp(mb, h.data(), *mtp, mo, ws, TestPool()).ok());
      std::vector<bf16> last(s.end() - m.stream_width(), s.end());
      const auto num_prompt = static_cast<std::ptrdiff_t>(r.prompt.size());
      // Draft j sits at position p + 1 + j and follows full[0, p] and drafts [0, j).
      std::vector<int32_t> output(full.begin() + num_prompt, full.begin() + p + 1);
      for (size_t j = 0; j < drafts.size(); ++j) {
        const int32_t want =
            r.sampling.greedy()
                ? static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) -
                                       logits.begin())
                : sampling::CoupledDraft(dist, logits.data(), r.sampling,
                                         sampling::SamplerState{*r.sampling.seed},
                                         {std::span(r.prompt), output});
        output.push_back(want);
        ASSERT_EQ(drafts[j], want) << "request " << r.id << " position " << p << " draft " << j;
        model::ForwardBatch cb;
        cb.Add(0, p + static_cast<int64_t>(j), {want});
        cb.logit_rows = {0};
        std::vector<bf16> next(last.size());
        model::ForwardOutputs co{logits.data(), nullptr, next.data(), /*approx_logits=*/true};
        ASSERT_TRUE(m.ForwardMtp(cb, last.data(), *mtp, co, ws, TestPool()).ok());
        last = next;
      }
    }
  }
}

TEST(ModelExecutorTest, AbortMidFlightReleasesEverything) {
  const std::vector<engine::Request> reqs = MakeRequests(10, 24, 3);
  const auto want = RunToCompletion(TestOptions(0), reqs);
  Result<launch::EngineParts> parts =
      launch::BuildEngine(TinyModel(), TestPool(), TestOptions(2), 256 << 20);
  ASSERT_TRUE(parts.ok());
  std::map<engine::RequestId, Finished> got;
  for (const engine::Request& r : reqs) ASSERT_TRUE(parts->core->AddRequest(r).ok());
  int step = 0;
  while (parts->core->HasUnfinished()) {
    // Abort the even ids at different points: waiting, prefilling, decoding.
    for (engine::RequestId id = 2; id <= 10; id += 2) {
      if (step == id) {
        ASSERT_TRUE(parts->core->Abort(id).ok());
      }
    }
    auto out = parts->core->Step();
    ASSERT_TRUE(out.ok());
    ++step;
    for (const auto& o : *out) {
      got[o.id].tokens.insert(got[o.id].tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
      got[o.id].reason = o.finish;
    }
  }
  (void)parts->core->Step();  // delivers the last releases to the executor
  for (const engine::Request& r : reqs) {
    if (r.id % 2 == 0) {
      EXPECT_EQ(got[r.id].reason, engine::FinishReason::kAbort) << r.id;
    } else {
      EXPECT_EQ(got[r.id].tokens, want.at(r.id).tokens) << r.id;
    }
  }
  EXPECT_EQ(parts->core->scheduler().cache().num_owners(), 0);
  EXPECT_EQ(parts->executor->num_live_slots(), 0);
  EXPECT_TRUE(parts->core->scheduler().CheckInvariants().ok());
}

// A step for a slot whose generation moved on is not run (and fails only
// that request); a release of an older generation is ignored.
TEST(ModelExecutorTest, StaleGenerationsAreIgnored) {
  runner::ModelExecutorOptions eo;
  eo.slots_per_partition = 2;
  auto ex = runner::ModelExecutor::Create(TinyModel(), TestPool(), eo);
  ASSERT_TRUE(ex.ok());
  engine::StepPlan p0;
  engine::ScheduledRequest e;
  e.id = 7;
  e.slot = 1;
  e.generation = 3;
  e.is_new = true;
  e.num_prompt_tokens = 5;
  e.token_ids = {5, 6, 7, 8, 9};
  e.needs_logits = true;
  p0.requests = {e};
  auto r0 = (*ex)->Run(p0);
  ASSERT_TRUE(r0.ok());
  ASSERT_EQ(r0->requests.size(), 1u);
  ASSERT_EQ(r0->requests[0].tokens.size(), 1u);
  engine::StepPlan p1;
  p1.step_id = 1;
  p1.released = {{7, 0, 1, 2}};  // an older generation: ignored
  engine::ScheduledRequest d = e;
  d.is_new = false;
  d.start_pos = 5;
  d.token_ids = {r0->requests[0].tokens[0]};
  engine::ScheduledRequest stale = d;
  stale.id = 8;
  stale.slot = 0;  // never started
  p1.requests = {d, stale};
  auto r1 = (*ex)->Run(p1);
  ASSERT_TRUE(r1.ok());
  ASSERT_EQ(r1->requests.size(), 1u);
  EXPECT_EQ(r1->requests[0].id, 7);
  EXPECT_EQ((*ex)->num_live_slots(), 1);
  engine::StepPlan p2;
  p2.step_id = 2;
  p2.released = {{7, 0, 1, 3}};
  ASSERT_TRUE((*ex)->Run(p2).ok());
  EXPECT_EQ((*ex)->num_live_slots(), 0);
}

}  // namespace
}  // namespace dsv4::testing
