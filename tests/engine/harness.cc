#include "harness.h"

namespace dsv4::testing {

engine::Dsv4CacheShapes TinyShapes() {
  engine::Dsv4CacheShapes s;
  s.num_layers = 4;
  s.num_csa_layers = 2;
  s.num_hca_layers = 1;
  s.num_mtp_layers = 1;
  s.head_dim = 8;
  s.index_head_dim = 4;
  s.window = 16;
  s.csa_ratio = 4;
  s.hca_ratio = 16;
  return s;
}

cache::CacheManager TinyCache(int32_t partitions, int64_t ring_pages, int64_t history_pages) {
  Result<std::vector<cache::CacheGroupSpec>> groups =
      engine::BuildDsv4CacheGroups(TinyShapes(), engine::CacheStorage::Bf16(TinyShapes()),
                                   kTinyBlock, engine::StatePageTokens{4, 8});
  EXPECT_TRUE(groups.ok());
  std::vector<int64_t> pages;
  for (const cache::CacheGroupSpec& g : *groups)
    pages.push_back(g.is_ring() ? ring_pages : history_pages);
  Result<cache::CacheManager> cache = cache::CacheManager::Create(*groups, partitions, pages);
  EXPECT_TRUE(cache.ok());
  return std::move(cache).value();
}

Harness::Harness(const engine::SchedulerConfig& config, cache::CacheManager cache,
                 int accept_percent, int stop_per_mille)
    : stop_per_mille_(stop_per_mille) {
  Result<std::unique_ptr<engine::Scheduler>> scheduler =
      engine::Scheduler::Create(config, std::move(cache));
  EXPECT_TRUE(scheduler.ok()) << scheduler.status().ToString();
  scheduler_ = std::move(scheduler).value();
  fake_ = std::make_unique<FakeExecutor>(
      scheduler_->cache(), [this](engine::RequestId id, int64_t pos) { return TrueToken(id, pos); },
      accept_percent);
}

int32_t Harness::TrueToken(engine::RequestId id, int64_t pos) const {
  auto it = limits_.find(id);
  if (it != limits_.end() && pos < it->second.prompt_len) {
    return 2 + static_cast<int32_t>((id * 131 + pos * 7) % 1000);
  }
  return FakeModelToken(id, pos, stop_per_mille_);
}

Status Harness::Add(engine::RequestId id, int64_t prompt_len, int64_t max_tokens, int32_t max_draft,
                    bool stop_on_fake_stop) {
  limits_[id] = {prompt_len, max_tokens, stop_on_fake_stop};
  engine::Request r;
  r.id = id;
  for (int64_t p = 0; p < prompt_len; ++p) r.prompt.push_back(TrueToken(id, p));
  r.max_tokens = max_tokens;
  r.max_draft_tokens = max_draft;
  if (stop_on_fake_stop) r.stop_token_ids = {kFakeStopToken};
  return scheduler_->AddRequest(std::move(r));
}

Finished Harness::Expected(engine::RequestId id) const {
  const Limits& l = limits_.at(id);
  Finished f;
  for (int64_t pos = l.prompt_len;; ++pos) {
    const int32_t t = TrueToken(id, pos);
    f.tokens.push_back(t);
    if (l.stop && t == kFakeStopToken) {
      f.reason = engine::FinishReason::kStop;
      break;
    }
    if (static_cast<int64_t>(f.tokens.size()) >= l.max_tokens ||
        pos + 1 >= scheduler_->config().max_model_len) {
      f.reason = engine::FinishReason::kLength;
      break;
    }
  }
  return f;
}

void Harness::Collect(std::vector<engine::RequestOutput> outputs) {
  for (engine::RequestOutput& o : outputs) {
    EXPECT_EQ(finished_.count(o.id), 0u) << "output after finish for request " << o.id;
    auto& tokens = streamed_[o.id];
    tokens.insert(tokens.end(), o.new_tokens.begin(), o.new_tokens.end());
    if (o.finish != engine::FinishReason::kNone) finished_[o.id] = {tokens, o.finish, o.error};
  }
}

engine::StepPlan Harness::Step() {
  engine::StepPlan plan = scheduler_->Schedule();
  EXPECT_LE(plan.num_tokens, scheduler_->config().max_num_batched_tokens);
  Result<engine::StepResult> result = fake_->Run(plan);
  if (result.ok()) {
    EXPECT_TRUE(scheduler_->Commit(plan, *result).ok());
  } else {
    scheduler_->FailStep(plan, result.status());
  }
  Collect(scheduler_->TakeOutputs());
  const Status invariants = scheduler_->CheckInvariants();
  EXPECT_TRUE(invariants.ok()) << invariants.ToString();
  EXPECT_TRUE(fake_->errors().empty()) << fake_->errors().front();
  return plan;
}

void Harness::RunToCompletion(int64_t max_steps) {
  for (int64_t i = 0; i < max_steps && scheduler_->HasUnfinished(); ++i) {
    Step();
    if (::testing::Test::HasFailure()) return;
  }
  EXPECT_FALSE(scheduler_->HasUnfinished());
  // One more plan hands the last released slots to the executor.
  Step();
  EXPECT_EQ(fake_->num_live_slots(), 0);
  EXPECT_TRUE(scheduler_->cache().AllFree());
}

}  // namespace dsv4::testing
