#include "fake_executor.h"

#include <fmt/format.h>

#include <algorithm>

namespace dsv4::testing {
namespace {

uint64_t Mix(uint64_t x) {
  // splitmix64 finaliser: a cheap, well-spread deterministic hash.
  x += 0x9e3779b97f4a7c15ull;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

uint64_t Hash(engine::RequestId id, int64_t pos, uint64_t salt) {
  return Mix(Mix(static_cast<uint64_t>(id) * 1000003ull + salt) ^ static_cast<uint64_t>(pos));
}

}  // namespace

int32_t FakeModelToken(engine::RequestId id, int64_t pos, int stop_per_mille) {
  const uint64_t h = Hash(id, pos, 17);
  if (static_cast<int>(h % 1000) < stop_per_mille) return kFakeStopToken;
  return 2 + static_cast<int32_t>((h >> 10) % 49998);
}

FakeExecutor::FakeExecutor(const cache::CacheManager& cache,
                           std::function<int32_t(engine::RequestId, int64_t)> true_token,
                           int accept_percent)
    : cache_(cache), true_token_(std::move(true_token)), accept_percent_(accept_percent) {
  store_.resize(size_t(cache.num_partitions()));
  for (auto& groups : store_) {
    for (int g = 0; g < cache.num_groups(); ++g) {
      groups.emplace_back(size_t(cache.num_pages(g) * cache.group(g).tokens_per_page));
    }
  }
}

FakeExecutor::Cell* FakeExecutor::CellAt(const engine::ScheduledRequest& e, int g, int64_t pos) {
  const cache::CacheGroupSpec& spec = cache_.group(g);
  const int32_t page = e.block_tables[size_t(g)].At(spec.PageOf(pos));
  if (page == cache::kNoPage) return nullptr;
  auto& cells = store_[size_t(e.partition)][size_t(g)];
  return &cells[size_t(page) * size_t(spec.tokens_per_page) + size_t(pos % spec.tokens_per_page)];
}

void FakeExecutor::CheckReads(const engine::ScheduledRequest& e) {
  for (int g = 0; g < cache_.num_groups(); ++g) {
    const cache::CacheGroupSpec& spec = cache_.group(g);
    for (int64_t pos = spec.LiveFrom(e.start_pos); pos < e.start_pos; ++pos) {
      const Cell* cell = CellAt(e, g, pos);
      if (cell == nullptr) {
        Error(fmt::format("request {} group {}: read position {} is not mapped", e.id, spec.name,
                          pos));
        return;
      }
      if (cell->id != e.id || cell->generation != e.generation || cell->pos != pos ||
          cell->token != true_token_(e.id, pos)) {
        Error(fmt::format(
            "request {} gen {} group {}: position {} holds (id {}, gen {}, pos {}, token {}), "
            "want token {}",
            e.id, e.generation, spec.name, pos, cell->id, cell->generation, cell->pos, cell->token,
            true_token_(e.id, pos)));
        return;
      }
    }
  }
}

void FakeExecutor::Write(const engine::ScheduledRequest& e,
                         const std::vector<int32_t>& row_tokens) {
  const int64_t end = e.start_pos + e.num_tokens();
  for (int g = 0; g < cache_.num_groups(); ++g) {
    const cache::CacheGroupSpec& spec = cache_.group(g);
    // Every position a commit may leave live must be stored.
    const int64_t must_from =
        spec.is_ring() ? std::max(e.start_pos, spec.LiveFrom(end - e.num_draft)) : e.start_pos;
    for (int64_t pos = e.start_pos; pos < end; ++pos) {
      Cell* cell = CellAt(e, g, pos);
      if (cell == nullptr) {
        if (pos >= must_from) {
          Error(
              fmt::format("request {} group {}: position {} (step [{}, {}), {} drafts) has no "
                          "page",
                          e.id, spec.name, pos, e.start_pos, end, e.num_draft));
        }
        continue;
      }
      *cell = {e.id, e.generation, pos, row_tokens[size_t(pos - e.start_pos)]};
    }
  }
}

engine::RequestResult FakeExecutor::RunRequest(const engine::ScheduledRequest& e) {
  engine::RequestResult r;
  r.id = e.id;
  r.generation = e.generation;
  const auto key = std::make_pair(e.partition, e.slot);
  auto it = slots_.find(key);
  if (e.is_new) {
    if (it != slots_.end())
      Error(fmt::format("request {}: slot {} reused unreleased", e.id, e.slot));
    if (e.start_pos != 0)
      Error(fmt::format("request {}: new slot at position {}", e.id, e.start_pos));
    it = slots_.insert_or_assign(key, SlotState{e.id, e.generation, 0}).first;
  } else if (it == slots_.end() || it->second.id != e.id || it->second.generation != e.generation ||
             it->second.next_pos != e.start_pos) {
    Error(fmt::format("request {} gen {}: slot {} state does not match (start {})", e.id,
                      e.generation, e.slot, e.start_pos));
    return r;
  }
  const int64_t num_real = e.num_real_tokens();
  for (int64_t i = 0; i < num_real; ++i) {
    if (e.token_ids[size_t(i)] != true_token_(e.id, e.start_pos + i)) {
      Error(fmt::format("request {}: fed token {} at position {}, want {}", e.id,
                        e.token_ids[size_t(i)], e.start_pos + i,
                        true_token_(e.id, e.start_pos + i)));
    }
  }
  for (int64_t i = num_real; i < e.num_tokens(); ++i) {
    if (e.token_ids[size_t(i)] != engine::kDraftToken)
      Error(fmt::format("request {}: draft row id", e.id));
  }
  CheckReads(e);
  // Drafts: right with probability accept_percent, else a different token.
  std::vector<int32_t> rows(e.token_ids.begin(), e.token_ids.begin() + num_real);
  int32_t accepted = 0;
  bool all_right = true;
  for (int64_t i = 0; i < e.num_draft; ++i) {
    const int64_t pos = e.start_pos + num_real + i;
    const int32_t truth = true_token_(e.id, pos);
    const bool right =
        static_cast<int>(Hash(e.id, pos, e.generation * 7919ull + 3) % 100) < accept_percent_;
    rows.push_back(right ? truth : truth + 1);
    all_right = all_right && right;
    if (all_right) ++accepted;
  }
  Write(e, rows);
  if (!e.needs_logits) {
    it->second.next_pos = e.start_pos + num_real;
    return r;
  }
  for (int32_t j = 0; j <= accepted; ++j)
    r.tokens.push_back(true_token_(e.id, e.start_pos + num_real + j));
  r.num_accepted_drafts = accepted;
  it->second.next_pos = e.start_pos + num_real + accepted;
  return r;
}

Result<engine::StepResult> FakeExecutor::Run(const engine::StepPlan& plan) {
  for (const engine::ReleasedSlot& rel : plan.released) {
    auto it = slots_.find({rel.partition, rel.slot});
    if (it == slots_.end() || it->second.id != rel.id || it->second.generation != rel.generation) {
      Error(fmt::format("release of request {} slot {} gen {} that is not live", rel.id, rel.slot,
                        rel.generation));
      continue;
    }
    slots_.erase(it);
  }
  for (const engine::ScheduledRequest& e : plan.requests) {
    for (int g = 0; g < cache_.num_groups(); ++g) {
      const int64_t t = cache_.group(g).tokens_per_page;
      for (int32_t page : e.fresh_pages[size_t(g)]) {
        auto& cells = store_[size_t(e.partition)][size_t(g)];
        std::fill(cells.begin() + page * t, cells.begin() + (page + 1) * t, Cell{});
        ++num_pages_cleared_;
      }
    }
  }
  if (fail_next_) {
    fail_next_ = false;
    // Lifecycle changes apply even though the compute fails: the scheduler
    // releases this plan's slots in the next plan.
    for (const engine::ScheduledRequest& e : plan.requests) {
      if (e.is_new)
        slots_.insert_or_assign({e.partition, e.slot}, SlotState{e.id, e.generation, 0});
    }
    return Internal("injected executor failure in step {}", plan.step_id);
  }
  engine::StepResult result;
  result.step_id = plan.step_id;
  for (const engine::ScheduledRequest& e : plan.requests) result.requests.push_back(RunRequest(e));
  return result;
}

}  // namespace dsv4::testing
