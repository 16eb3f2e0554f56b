// What rank 0 sends the followers (launch/plan_codec.h): every field of a
// plan and of the engine options survives the round trip, and damaged bytes
// are errors, not crashes.
#include "launch/plan_codec.h"

#include <gtest/gtest.h>

namespace dsv4::launch {
namespace {

engine::StepPlan FullPlan() {
  engine::StepPlan p;
  p.step_id = 77;
  p.num_tokens = 5;
  engine::ScheduledRequest q;
  q.id = 12;
  q.partition = 1;
  q.slot = 3;
  q.generation = 9;
  q.is_new = true;
  q.sampling.temperature = 0.7f;
  q.sampling.top_p = 0.9f;
  q.sampling.top_k = 40;
  q.sampling.min_p = 0.05f;
  q.sampling.seed = 1234567890123ULL;
  q.sampling.presence_penalty = 0.5f;
  q.sampling.frequency_penalty = -0.25f;
  q.sampling.repetition_penalty = 1.1f;
  q.sampling.logprobs = 4;
  q.sampling.logit_bias = {{5, 1.5f}, {9, -100.0f}};
  q.sampling.ignore_eos = true;
  q.sampling.min_tokens = 3;
  q.sampling.min_tokens_stop_ids = {1, 2};
  q.num_prompt_tokens = 4;
  q.start_pos = 2;
  q.token_ids = {10, 11, engine::kDraftToken};
  q.num_draft = 1;
  q.num_padded_tokens = 3;
  q.needs_logits = true;
  q.block_tables.resize(2);
  q.block_tables[0].first_page = 1;
  q.block_tables[0].pages = {4, cache::kNoPage, 6};
  q.block_tables[1].pages = {8};
  q.fresh_pages = {{6}, {}};
  q.decode = true;
  q.restore_snapshot = 2;
  q.prefix_token_ids = {7, 8};
  q.save_snapshot = 5;
  q.save_at = 256;
  p.requests.push_back(q);
  p.requests.push_back(engine::ScheduledRequest{});
  p.released.push_back(engine::ReleasedSlot{3, 0, 2, 8});
  engine::SchedulerEvent ev;
  ev.kind = engine::SchedulerEvent::Kind::kChunkShrunk;
  ev.id = 12;
  ev.wanted = 9;
  ev.got = 4;
  p.events.push_back(ev);
  return p;
}

void ExpectSameRequest(const engine::ScheduledRequest& a, const engine::ScheduledRequest& b) {
  EXPECT_EQ(a.id, b.id);
  EXPECT_EQ(a.partition, b.partition);
  EXPECT_EQ(a.slot, b.slot);
  EXPECT_EQ(a.generation, b.generation);
  EXPECT_EQ(a.is_new, b.is_new);
  const engine::SamplingParams &x = a.sampling, &y = b.sampling;
  EXPECT_EQ(x.temperature, y.temperature);
  EXPECT_EQ(x.top_p, y.top_p);
  EXPECT_EQ(x.top_k, y.top_k);
  EXPECT_EQ(x.min_p, y.min_p);
  EXPECT_EQ(x.seed, y.seed);
  EXPECT_EQ(x.presence_penalty, y.presence_penalty);
  EXPECT_EQ(x.frequency_penalty, y.frequency_penalty);
  EXPECT_EQ(x.repetition_penalty, y.repetition_penalty);
  EXPECT_EQ(x.logprobs, y.logprobs);
  EXPECT_EQ(x.logit_bias, y.logit_bias);
  EXPECT_EQ(x.ignore_eos, y.ignore_eos);
  EXPECT_EQ(x.min_tokens, y.min_tokens);
  EXPECT_EQ(x.min_tokens_stop_ids, y.min_tokens_stop_ids);
  EXPECT_EQ(a.num_prompt_tokens, b.num_prompt_tokens);
  EXPECT_EQ(a.start_pos, b.start_pos);
  EXPECT_EQ(a.token_ids, b.token_ids);
  EXPECT_EQ(a.num_draft, b.num_draft);
  EXPECT_EQ(a.num_padded_tokens, b.num_padded_tokens);
  EXPECT_EQ(a.needs_logits, b.needs_logits);
  ASSERT_EQ(a.block_tables.size(), b.block_tables.size());
  for (size_t g = 0; g < a.block_tables.size(); ++g) {
    EXPECT_EQ(a.block_tables[g].first_page, b.block_tables[g].first_page);
    EXPECT_EQ(a.block_tables[g].pages, b.block_tables[g].pages);
  }
  EXPECT_EQ(a.fresh_pages, b.fresh_pages);
  EXPECT_EQ(a.decode, b.decode);
  EXPECT_EQ(a.restore_snapshot, b.restore_snapshot);
  EXPECT_EQ(a.prefix_token_ids, b.prefix_token_ids);
  EXPECT_EQ(a.save_snapshot, b.save_snapshot);
  EXPECT_EQ(a.save_at, b.save_at);
}

TEST(PlanCodecTest, EveryFieldRoundTrips) {
  const engine::StepPlan p = FullPlan();
  auto back = DecodePlan(EncodePlan(p));
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_EQ(back->step_id, p.step_id);
  EXPECT_EQ(back->num_tokens, p.num_tokens);
  ASSERT_EQ(back->requests.size(), p.requests.size());
  for (size_t i = 0; i < p.requests.size(); ++i)
    ExpectSameRequest(p.requests[i], back->requests[i]);
  EXPECT_FALSE(back->requests[1].sampling.seed.has_value());
  ASSERT_EQ(back->released.size(), 1u);
  EXPECT_EQ(back->released[0].generation, 8u);
  ASSERT_EQ(back->events.size(), 1u);
  EXPECT_EQ(back->events[0].kind, engine::SchedulerEvent::Kind::kChunkShrunk);
  EXPECT_EQ(back->events[0].got, 4);
}

TEST(PlanCodecTest, DamagedBytesAreErrors) {
  const std::vector<uint8_t> bytes = EncodePlan(FullPlan());
  for (size_t cut = 0; cut < bytes.size(); cut += 7) {
    const std::vector<uint8_t> truncated(bytes.begin(), bytes.begin() + static_cast<long>(cut));
    EXPECT_FALSE(DecodePlan(truncated).ok()) << "cut at " << cut;
  }
  std::vector<uint8_t> longer = bytes;
  longer.push_back(0);
  EXPECT_FALSE(DecodePlan(longer).ok());
  std::vector<uint8_t> huge_count = bytes;
  for (size_t i = 16; i < 24; ++i) huge_count[i] = 0xff;  // the request count
  EXPECT_FALSE(DecodePlan(huge_count).ok());
}

// DP attention across ranks: a rank's step result reaches rank 0 whole, a
// failed Run arrives as its error, and damaged bytes are flagged as such.
TEST(PlanCodecTest, StepResultRoundTrips) {
  engine::StepResult r;
  r.step_id = 41;
  engine::RequestResult a;
  a.id = 7;
  a.generation = 3;
  a.tokens = {5, 6, 9};
  a.num_accepted_drafts = 2;
  a.drafts = {5, 6, 8};
  a.logprobs.push_back({5, -0.25f, {{5, -0.25f}, {4, -1.5f}}});
  a.logprobs.push_back({6, -3.0f, {}});
  a.logprobs.push_back({9, -0.125f, {{9, -0.125f}}});
  engine::RequestResult b;
  b.id = 8;
  b.error = DataLoss("logits of request 8 are not finite");
  r.requests = {a, b};
  bool malformed = true;
  Result<engine::StepResult> back = DecodeStepResult(EncodeStepResult(r), &malformed);
  ASSERT_TRUE(back.ok()) << back.status().ToString();
  EXPECT_FALSE(malformed);
  EXPECT_EQ(back->step_id, 41u);
  ASSERT_EQ(back->requests.size(), 2u);
  const engine::RequestResult& x = back->requests[0];
  EXPECT_EQ(x.id, 7);
  EXPECT_EQ(x.generation, 3u);
  EXPECT_EQ(x.tokens, a.tokens);
  EXPECT_EQ(x.num_accepted_drafts, 2);
  EXPECT_EQ(x.drafts, a.drafts);
  ASSERT_EQ(x.logprobs.size(), 3u);
  EXPECT_EQ(x.logprobs[0].token, 5);
  EXPECT_EQ(x.logprobs[0].logprob, -0.25f);
  EXPECT_EQ(x.logprobs[0].top, a.logprobs[0].top);
  EXPECT_TRUE(x.logprobs[1].top.empty());
  EXPECT_TRUE(x.error.ok());
  EXPECT_EQ(back->requests[1].error.code(), StatusCode::kDataLoss);
  EXPECT_EQ(back->requests[1].error.message(), "logits of request 8 are not finite");

  back =
      DecodeStepResult(EncodeStepResult(Result<engine::StepResult>(Internal("boom"))), &malformed);
  EXPECT_FALSE(malformed);
  EXPECT_EQ(back.status().code(), StatusCode::kInternal);
  EXPECT_EQ(back.status().message(), "boom");

  std::vector<uint8_t> bytes = EncodeStepResult(r);
  bytes.pop_back();
  back = DecodeStepResult(bytes, &malformed);
  EXPECT_TRUE(malformed);
  EXPECT_FALSE(back.ok());
}

TEST(PlanCodecTest, EngineOptionsRoundTrip) {
  EngineOptions o;
  o.model_dir = "/models/flash";
  o.threads = 7;
  o.cpu_list = "auto";  // unresolved: each rank resolves it on its own node
  o.numa = "auto";
  o.max_model_len = 8192;
  o.max_num_seqs = 5;
  o.max_num_batched_tokens = 2048;
  o.long_prefill_token_threshold = 512;
  o.block_size = 256;
  o.dp = 1;
  o.ep = 4;
  o.dist_timeout_s = 12.5;
  o.num_speculative_tokens = 2;
  o.prepacked = "off";
  o.enable_prefix_caching = false;
  o.kv_cache_memory = int64_t{3} << 30;
  o.memory_utilization = 0.75;
  auto b = DecodeEngineOptions(EncodeEngineOptions(o));
  ASSERT_TRUE(b.ok()) << b.status().ToString();
  EXPECT_EQ(b->model_dir, o.model_dir);
  EXPECT_EQ(b->threads, o.threads);
  EXPECT_EQ(b->cpu_list, o.cpu_list);
  EXPECT_EQ(b->numa, o.numa);
  EXPECT_EQ(b->max_model_len, o.max_model_len);
  EXPECT_EQ(b->max_num_seqs, o.max_num_seqs);
  EXPECT_EQ(b->max_num_batched_tokens, o.max_num_batched_tokens);
  EXPECT_EQ(b->long_prefill_token_threshold, o.long_prefill_token_threshold);
  EXPECT_EQ(b->block_size, o.block_size);
  EXPECT_EQ(b->ep, o.ep);
  EXPECT_EQ(b->dist_timeout_s, o.dist_timeout_s);
  EXPECT_EQ(b->num_speculative_tokens, o.num_speculative_tokens);
  EXPECT_EQ(b->prepacked, o.prepacked);
  EXPECT_EQ(b->enable_prefix_caching, o.enable_prefix_caching);
  EXPECT_EQ(b->kv_cache_memory, o.kv_cache_memory);
  EXPECT_EQ(b->memory_utilization, o.memory_utilization);
  EXPECT_FALSE(DecodeEngineOptions({1, 2, 3}).ok());
}

}  // namespace
}  // namespace dsv4::launch
