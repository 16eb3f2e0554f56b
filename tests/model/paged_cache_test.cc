// Caches with external pages (the engine's fixed pools, rows addressed by the
// scheduler's block tables) on tiny-a: bitwise equal to self-managed caches
// whatever the page order, independent of what the pools held before, rows
// in the pages their tables name, and a table that does not fit the call is
// an error that leaves the cache as it was.
#include <gtest/gtest.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <limits>
#include <map>
#include <memory>
#include <random>
#include <vector>

#include "model/model.h"
#include "testing/golden.h"
#include "tiny_model_fixture.h"

namespace dsv4 {
namespace {

constexpr int64_t kPageTokens = 128;  // --block-size: cmp_c4 / idx 32 rows, cmp_c128 1 row
constexpr int64_t kPoolPages = 12;
constexpr int64_t kSlack = 6;             // ring slack for the re-run of rejected "draft" positions
constexpr uint16_t kPoisonBits = 0x7FC1;  // a quiet NaN

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

// Stand-in for the scheduler's bookkeeping of the three full-history groups:
// each group's free list hands out pages in a scrambled order (a different
// permutation per group), sequences growing in the same call interleave, and
// a release goes to the far end of the free list so a re-mapped logical page
// gets another physical page.
class Pager {
 public:
  Pager() {
    for (int g : model::kPooledGroups) {
      std::vector<int32_t> order(Sz(kPoolPages));
      for (int64_t i = 0; i < kPoolPages; ++i) order[Sz(i)] = static_cast<int32_t>(i);
      std::mt19937 rng(static_cast<uint32_t>(17 + g));
      std::shuffle(order.begin(), order.end(), rng);
      free_[Sz(g)] = order;  // back() is taken next
    }
  }

  // Commit(start) then Allocate([start, end)): keeps the pages of positions
  // [0, start), maps those of [0, end) and records the newly taken ones.
  void Step(int64_t slot, int64_t start, int64_t end) {
    auto& tables = tables_[slot];
    auto& fresh = fresh_[slot];
    const auto keep = Sz((start + kPageTokens - 1) / kPageTokens);
    const auto need = Sz((end + kPageTokens - 1) / kPageTokens);
    for (int g : model::kPooledGroups) {
      std::vector<int32_t>& t = tables[Sz(g)];
      while (t.size() > keep) {
        free_[Sz(g)].insert(free_[Sz(g)].begin(), t.back());
        t.pop_back();
      }
      fresh[Sz(g)].clear();
      while (t.size() < need) {
        ASSERT_FALSE(free_[Sz(g)].empty());
        t.push_back(free_[Sz(g)].back());
        fresh[Sz(g)].push_back(free_[Sz(g)].back());
        free_[Sz(g)].pop_back();
      }
    }
  }

  // Points every slice's SlicePages at this pager's tables.
  void Attach(model::ForwardBatch* b) const {
    for (model::SequenceSlice& s : b->seqs) {
      for (int g : model::kPooledGroups) {
        s.pages.tables[Sz(g)] = tables_.at(s.cache_slot)[Sz(g)];
        s.pages.fresh[Sz(g)] = fresh_.at(s.cache_slot)[Sz(g)];
      }
    }
  }

  const std::vector<int32_t>& table(int64_t slot, cache::Dsv4Group g) const {
    return tables_.at(slot)[Sz(g)];
  }

 private:
  std::array<std::vector<int32_t>, cache::kNumDsv4Groups> free_;
  std::map<int64_t, std::array<std::vector<int32_t>, cache::kNumDsv4Groups>> tables_;
  std::map<int64_t, std::array<std::vector<int32_t>, cache::kNumDsv4Groups>> fresh_;
};

struct Slice {
  int64_t slot, start, end;
};

class PagedCacheTest : public testing::TinyModelTest {
 protected:
  static model::CacheOptions Options() {
    model::CacheOptions o;
    o.ring_capacity = model_->config().sliding_window + kSlack;
    o.include_mtp = false;
    return o;
  }
  static std::unique_ptr<model::ModelCache> EngineCache(int64_t num_slots,
                                                        int64_t num_pages = kPoolPages) {
    model::CachePools pools;
    pools.page_tokens = kPageTokens;
    pools.num_pages.fill(num_pages);
    auto c = model_->NewCache(num_slots, Options(), pools);
    EXPECT_TRUE(c.ok()) << c.status().ToString();
    return c.ok() ? std::move(c).value() : nullptr;
  }
  static std::vector<int32_t> Tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> v(Sz(n));
    for (auto& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab()));
    return v;
  }
  static int64_t vocab() { return model_->config().vocab_size; }

  // One call over `slices` of sequences ids[slot]; logits of every row.
  model::ForwardBatch Batch(const std::vector<Slice>& slices,
                            const std::map<int64_t, std::vector<int32_t>>& ids) {
    model::ForwardBatch b;
    for (const Slice& s : slices) {
      const std::vector<int32_t>& t = ids.at(s.slot);
      b.Add(s.slot, s.start, std::vector<int32_t>(t.begin() + s.start, t.begin() + s.end));
    }
    for (int64_t r = 0; r < b.num_tokens(); ++r) b.logit_rows.push_back(r);
    return b;
  }
  Status Run(const model::ForwardBatch& b, model::ModelCache& cache, std::vector<float>* logits) {
    logits->assign(Sz(b.num_tokens() * vocab()), 0.0f);
    model::ForwardOutputs out;
    out.logits = logits->data();
    return model_->Forward(b, cache, out, ws_, pool_);
  }

  // Two sequences through the same calls on a self-managed and an engine
  // cache (scrambled, interleaved pages; optionally poisoned pools first):
  // prefill chunks crossing 4- and 128-token blocks and pages, a "draft"
  // call whose rows cross a page boundary and are then re-run from an
  // earlier position (the page released and mapped anew), decode rows.
  void RunScenario(bool poison) {
    const std::map<int64_t, std::vector<int32_t>> ids = {{0, Tokens(300, 5)}, {1, Tokens(270, 6)}};
    const std::vector<std::vector<Slice>> calls = {
        {{0, 0, 100}, {1, 0, 60}},
        {{1, 60, 129}, {0, 100, 131}},
        {{0, 131, 254}, {1, 129, 135}},
        {{0, 254, 261}, {1, 135, 140}},  // 0: positions 256.. are drafts
        {{0, 256, 258}},                 // rejected: re-run from 256 on a new page
        {{1, 140, 260}, {0, 258, 259}},
        {{0, 259, 260}, {1, 260, 261}},
    };
    auto ref = model_->NewCache(2, Options());
    engine_ = EngineCache(2);
    ASSERT_NE(engine_, nullptr);
    if (poison) engine_->FillPools(bf16{kPoisonBits});
    pager_ = Pager();
    std::vector<float> want, got;
    for (size_t c = 0; c < calls.size(); ++c) {
      for (const Slice& s : calls[c]) pager_.Step(s.slot, s.start, s.end);
      model::ForwardBatch b = Batch(calls[c], ids);
      ASSERT_TRUE(Run(b, *ref, &want).ok());
      pager_.Attach(&b);
      const Status st = Run(b, *engine_, &got);
      ASSERT_TRUE(st.ok()) << "call " << c << ": " << st.ToString();
      ASSERT_EQ(std::memcmp(want.data(), got.data(), want.size() * sizeof(float)), 0)
          << "call " << c;
    }
    // Same rows, and each lies where its table says.
    int64_t num_checked = 0;
    for (int64_t l = 0; l < model_->num_layers(); ++l) {
      for (int g : model::kPooledGroups) {
        const auto group = static_cast<cache::Dsv4Group>(g);
        const model::PagedRows* e = engine_->layer(l).history(group);
        const model::PagedRows* r = ref->layer(l).history(group);
        ASSERT_EQ(e == nullptr, r == nullptr);
        if (e == nullptr) continue;
        for (int64_t slot = 0; slot < 2; ++slot) {
          ASSERT_EQ(e->size(slot), r->size(slot));
          ASSERT_GT(e->size(slot), 1);
          const std::vector<int32_t>& table = pager_.table(slot, group);
          for (int64_t i = 0; i < e->size(slot); ++i) {
            const int32_t page = table[Sz(i / e->rows_per_page())];
            ASSERT_EQ(e->PageOfRow(slot, i), page) << "layer " << l << " row " << i;
            ASSERT_EQ(e->Row(slot, i), e->PageData(page) + (i % e->rows_per_page()) * e->width());
            ASSERT_EQ(std::memcmp(e->Row(slot, i), r->Row(slot, i), Sz(e->width()) * 2), 0);
            ++num_checked;
          }
        }
      }
    }
    EXPECT_GT(num_checked, 400);
  }

  model::Workspace ws_;
  std::unique_ptr<model::ModelCache> engine_;
  Pager pager_;
};

TEST_F(PagedCacheTest, ScrambledPagesEqualSelfManagedCache) { RunScenario(false); }

// Rows are written before they are read, so whatever a previous owner left
// in the pools cannot leak into the outputs.
TEST_F(PagedCacheTest, PoisonedPoolsChangeNothing) { RunScenario(true); }

// Fresh pages are zeroed in every layer's pool before the call writes them:
// after a 10-token call on poisoned pools, the given pages hold the 2 CSA
// rows and the 2 indexer keys, zeros elsewhere; pages not given stay poisoned.
TEST_F(PagedCacheTest, FreshPagesAreZeroedInEveryLayer) {
  auto cache = EngineCache(1);
  ASSERT_NE(cache, nullptr);
  cache->FillPools(bf16{kPoisonBits});
  Pager pager;
  pager.Step(0, 0, 10);
  model::ForwardBatch b = Batch({{0, 0, 10}}, {{0, Tokens(10, 7)}});
  pager.Attach(&b);
  std::vector<float> logits;
  ASSERT_TRUE(Run(b, *cache, &logits).ok());
  int64_t num_layers_checked = 0;
  for (int64_t l = 0; l < model_->num_layers(); ++l) {
    for (int g : model::kPooledGroups) {
      const auto group = static_cast<cache::Dsv4Group>(g);
      const model::PagedRows* rows = cache->layer(l).history(group);
      if (rows == nullptr) continue;
      ++num_layers_checked;
      const int64_t written = g == cache::kGroupCmpC128 ? 0 : 2;
      ASSERT_EQ(rows->size(0), written);
      const int32_t page = pager.table(0, group)[0];
      for (int64_t r = 0; r < rows->rows_per_page(); ++r) {
        const bf16* row = rows->PageData(page) + r * rows->width();
        int64_t zeros = 0, poisoned = 0;
        for (int64_t j = 0; j < rows->width(); ++j) {
          zeros += row[j].bits == 0 ? 1 : 0;
          poisoned += row[j].bits == kPoisonBits ? 1 : 0;
        }
        ASSERT_EQ(poisoned, 0) << "layer " << l << " group " << g << " row " << r;
        if (r >= written) {
          ASSERT_EQ(zeros, rows->width()) << "layer " << l << " row " << r;
        }
      }
      const int32_t other = page == 0 ? 1 : 0;
      EXPECT_EQ(rows->PageData(other)[0].bits, kPoisonBits);
    }
  }
  EXPECT_EQ(num_layers_checked, 6);  // 2 CSA x (cmp_c4, idx) + 2 HCA x cmp_c128
}

// A call whose pages do not fit is refused before anything changes: no row,
// no count, no page content (fresh pages included) moves.
TEST_F(PagedCacheTest, PagesThatDoNotFitAreAnErrorAndChangeNothing) {
  auto cache = EngineCache(1);
  ASSERT_NE(cache, nullptr);
  const std::map<int64_t, std::vector<int32_t>> ids = {{0, Tokens(200, 8)}};
  Pager pager;
  pager.Step(0, 0, 10);
  model::ForwardBatch first = Batch({{0, 0, 10}}, ids);
  pager.Attach(&first);
  std::vector<float> logits;
  ASSERT_TRUE(Run(first, *cache, &logits).ok());
  const model::PagedRows& c4 = *cache->layer(2).history(cache::kGroupCmpC4);
  const int32_t page0 = pager.table(0, cache::kGroupCmpC4)[0];
  const std::vector<bf16> before(c4.PageData(page0), c4.PageData(page0) + 2 * c4.width());

  auto expect_refused = [&](model::ForwardBatch b, StatusCode code, const char* what) {
    const Status s = Run(b, *cache, &logits);
    EXPECT_EQ(s.code(), code) << what << ": " << s.ToString();
    EXPECT_EQ(cache->NumCachedTokens(0), 10) << what;
    EXPECT_EQ(cache->layer(2).NumCompressed(0), 2) << what;
    EXPECT_EQ(cache->layer(2).NumIndexKeys(0), 2) << what;
    EXPECT_EQ(std::memcmp(c4.PageData(page0), before.data(), before.size() * 2), 0) << what;
  };
  // [10, 140) reaches logical page 1 of every group; give only page 0, and
  // page 0 as "fresh" (it must not be zeroed by a refused call).
  const std::vector<int32_t> short_table = {page0};
  model::ForwardBatch b = Batch({{0, 10, 140}}, ids);
  for (int g : model::kPooledGroups) {
    b.seqs[0].pages.tables[Sz(g)] = pager.table(0, static_cast<cache::Dsv4Group>(g));
    b.seqs[0].pages.fresh[Sz(g)] = b.seqs[0].pages.tables[Sz(g)];
  }
  b.seqs[0].pages.tables[cache::kGroupCmpC4] = short_table;
  expect_refused(b, StatusCode::kFailedPrecondition, "table too short");

  pager.Step(0, 10, 140);
  model::ForwardBatch ok = Batch({{0, 10, 140}}, ids);
  pager.Attach(&ok);
  const std::vector<int32_t> out_of_range = {page0, static_cast<int32_t>(kPoolPages)};
  b = ok;
  b.seqs[0].pages.tables[cache::kGroupIdx] = out_of_range;
  expect_refused(b, StatusCode::kInvalidArgument, "page id out of range");
  std::vector<int32_t> moved = pager.table(0, cache::kGroupCmpC4);
  moved[0] = moved[1];
  b = ok;
  b.seqs[0].pages.tables[cache::kGroupCmpC4] = moved;
  expect_refused(b, StatusCode::kFailedPrecondition, "page of kept rows moved");
  const std::vector<int32_t> bad_fresh = {-1};
  b = ok;
  b.seqs[0].pages.fresh[cache::kGroupCmpC128] = bad_fresh;
  expect_refused(b, StatusCode::kInvalidArgument, "fresh page out of range");
  b = ok;
  b.seqs[0].pages = model::SlicePages();
  expect_refused(b, StatusCode::kFailedPrecondition, "no pages for an external cache");
  ASSERT_TRUE(Run(ok, *cache, &logits).ok());
  EXPECT_EQ(cache->NumCachedTokens(0), 140);

  // A self-managed cache refuses page tables; pools need whole ratio blocks.
  auto self = model_->NewCache(1, Options());
  model::ForwardBatch with_pages = Batch({{0, 0, 10}}, ids);
  with_pages.seqs[0].pages.tables[cache::kGroupCmpC4] = short_table;
  EXPECT_EQ(Run(with_pages, *self, &logits).code(), StatusCode::kFailedPrecondition);
  EXPECT_EQ(self->NumCachedTokens(0), 0);
  model::CachePools odd;
  odd.page_tokens = 100;
  EXPECT_EQ(model_->NewCache(1, Options(), odd).status().code(), StatusCode::kInvalidArgument);
}

// Per-slot ring and compressor-state bytes of Flash with K = 1 (docs/engine.md
// §2, docs/model.md): 2 SWA + 21 CSA + 20 HCA layers and the MTP window,
// head_dim 512, index_head_dim 128, window 128, rings of 129 rows.
// The model declares the cache NewCache builds: the plan prices each pooled
// group's page at exactly the bytes the pools allocate, ring groups live in
// per-slot storage (page_bytes 0, slot_bytes), and a page size the model
// cannot page is an error naming the flag.
TEST_F(PagedCacheTest, DeclaredCacheIsWhatNewCacheAllocates) {
  for (int64_t page_tokens : {int64_t{128}, int64_t{256}}) {
    for (bool mtp : {false, true}) {
      model::CacheOptions o = Options();
      o.include_mtp = mtp;
      Result<model::CacheDeclaration> d = model_->DeclareCache(o, page_tokens);
      ASSERT_TRUE(d.ok()) << d.status().ToString();
      ASSERT_EQ(d->groups.size(), size_t{cache::kNumDsv4Groups});
      EXPECT_EQ(d->page_tokens, page_tokens);
      model::CachePools pools;
      pools.page_tokens = page_tokens;
      pools.num_pages.fill(3);
      Result<std::unique_ptr<model::ModelCache>> cache = model_->NewCache(2, o, pools);
      ASSERT_TRUE(cache.ok()) << cache.status().ToString();
      int64_t pool_bytes = 0;
      for (int g = 0; g < cache::kNumDsv4Groups; ++g) {
        const cache::CacheGroupSpec& spec = d->groups[Sz(g)];
        EXPECT_TRUE(cache::ValidateGroupSpec(spec).ok()) << spec.name;
        if (!spec.is_ring()) {
          EXPECT_EQ(spec.tokens_per_page, page_tokens) << spec.name;
        }
        const bool pooled = std::find(model::kPooledGroups.begin(), model::kPooledGroups.end(),
                                      g) != model::kPooledGroups.end();
        EXPECT_EQ(pooled, !spec.is_ring()) << spec.name;
        if (!pooled) {
          EXPECT_EQ(spec.page_bytes, 0) << spec.name;
          continue;
        }
        EXPECT_GT(spec.page_bytes, 0) << spec.name;
        EXPECT_EQ(spec.page_bytes,
                  static_cast<int64_t>((*cache)->PageBytes(static_cast<cache::Dsv4Group>(g))))
            << spec.name << " page_tokens=" << page_tokens;
        pool_bytes += 3 * spec.page_bytes;
      }
      EXPECT_EQ(d->slot_bytes, static_cast<int64_t>((*cache)->FixedBytesPerSlot()));
      EXPECT_EQ(static_cast<int64_t>((*cache)->AllocatedBytes()), 2 * d->slot_bytes + pool_bytes);
      // The MTP block's window rides in ori one row behind: one more row of lookback.
      EXPECT_EQ(d->groups[cache::kGroupOri].lookback,
                model_->config().sliding_window - 1 + (mtp && model_->has_mtp() ? 1 : 0));
    }
  }
  Result<model::CacheDeclaration> bad = model_->DeclareCache(Options(), 100);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("--block-size 100"), std::string::npos)
      << bad.status().ToString();
  EXPECT_FALSE(model_->DeclareCache(Options(), 0).ok());
}

TEST(PagedCacheBytesTest, FlashPerSlotRings) {
  model::AttentionCacheGeometry g;
  g.head_dim = 512;
  g.sliding_window = 128;
  g.ring_capacity = 129;
  g.index_head_dim = 128;
  const size_t swa = model::AttentionCache::FixedBytesFor(g);
  g.compress_ratio = 4;
  const size_t csa = model::AttentionCache::FixedBytesFor(g);
  g.compress_ratio = 128;
  const size_t hca = model::AttentionCache::FixedBytesFor(g);
  EXPECT_EQ(swa, 129u * 512 * 2);
  EXPECT_EQ(csa, swa + 2 * (9 * 2 * 512 + 9 * 2 * 128) * 4);
  EXPECT_EQ(hca, swa + 2 * 129 * 512 * 4);
  EXPECT_EQ(3 * swa + 21 * csa + 20 * hca, 18'315'264u);
}

// Resident memory of the page pools grows with use, not with their size.
TEST_F(PagedCacheTest, PoolsAreBackedLazily) {
  auto rss_bytes = [] {
    long pages = 0, resident = 0;
    FILE* f = std::fopen("/proc/self/statm", "r");
    if (f == nullptr) return int64_t{-1};
    const int n = std::fscanf(f, "%ld %ld", &pages, &resident);
    std::fclose(f);
    return n == 2 ? int64_t{resident} * 4096 : int64_t{-1};
  };
  const int64_t before = rss_bytes();
  ASSERT_GT(before, 0);
  // 65536 pages: 512 MiB per CSA layer and group, 2 GiB in all.
  auto cache = EngineCache(1, 65536);
  ASSERT_NE(cache, nullptr);
  EXPECT_EQ(cache->AllocatedBytes() - cache->FixedBytesPerSlot(),
            size_t{65536} * (4 * 32 * 128 * 2 + 2 * 1 * 128 * 2));
  Pager pager;
  pager.Step(0, 0, 10);
  model::ForwardBatch b = Batch({{0, 0, 10}}, {{0, Tokens(10, 9)}});
  pager.Attach(&b);
  std::vector<float> logits;
  ASSERT_TRUE(Run(b, *cache, &logits).ok());
  EXPECT_LT(rss_bytes() - before, int64_t{256} << 20);
}

}  // namespace
}  // namespace dsv4
