// Prefix caching at the model level (docs/engine.md §7.2) on tiny-a: a slot
// restored from a snapshot taken at a page boundary, next to the pages the
// writer's history lies in, continues bitwise like a cold run of the same
// tokens; the shared pages are never written again (by the restored sequence
// or by the writer); a restore that would share a partly filled page, a
// table that does not fit or a snapshot of another shape is an error that
// leaves the slot as it was.
#include <gtest/gtest.h>

#include <array>
#include <cstring>
#include <map>
#include <memory>
#include <random>
#include <span>
#include <vector>

#include "model/model.h"
#include "tiny_model_fixture.h"

namespace dsv4 {
namespace {

constexpr int64_t kPageTokens = 128;  // cmp_c4 / idx 32 rows per page, cmp_c128 1 row
constexpr int64_t kPoolPages = 16;
constexpr int64_t kSlack = 2;  // ring rows of K = 2

size_t Sz(int64_t v) { return static_cast<size_t>(v); }

using Tables = std::array<std::vector<int32_t>, cache::kNumDsv4Groups>;

class PrefixRestoreTest : public testing::TinyModelTest {
 protected:
  static model::CacheOptions Options() {
    model::CacheOptions o;
    o.ring_capacity = model_->config().sliding_window + kSlack;
    o.include_mtp = true;  // the MTP block's ring is part of the snapshot
    return o;
  }
  void SetUp() override {
    TinyModelTest::SetUp();
    model::CachePools pools;
    pools.page_tokens = kPageTokens;
    pools.num_pages.fill(kPoolPages);
    auto c = model_->NewCache(3, Options(), pools);
    ASSERT_TRUE(c.ok()) << c.status().ToString();
    cache_ = std::move(c).value();
  }
  static std::vector<int32_t> Tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> v(Sz(n));
    for (auto& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab()));
    return v;
  }
  static int64_t vocab() { return model_->config().vocab_size; }

  // Maps pages of slot up to position `end` from `next_page_[slot]` on (the
  // same page id in every pooled group) and runs rows [start, end) of ids;
  // returns the logits of every row.
  std::vector<float> Run(int64_t slot, const std::vector<int32_t>& ids, int64_t start,
                         int64_t end) {
    Tables& t = tables_[slot];
    Tables fresh;
    const auto need = Sz((end + kPageTokens - 1) / kPageTokens);
    for (int g : model::kPooledGroups) {
      while (t[Sz(g)].size() < need) {
        const int32_t page = next_page_[slot] + static_cast<int32_t>(t[Sz(g)].size());
        t[Sz(g)].push_back(page);
        fresh[Sz(g)].push_back(page);
      }
    }
    model::ForwardBatch b;
    b.Add(slot, start, std::vector<int32_t>(ids.begin() + start, ids.begin() + end));
    for (int64_t r = 0; r < b.num_tokens(); ++r) b.logit_rows.push_back(r);
    for (int g : model::kPooledGroups) {
      b.seqs[0].pages.tables[Sz(g)] = t[Sz(g)];
      b.seqs[0].pages.fresh[Sz(g)] = fresh[Sz(g)];
    }
    std::vector<float> logits(Sz(b.num_tokens() * vocab()));
    model::ForwardOutputs out;
    out.logits = logits.data();
    const Status st = model_->Forward(b, *cache_, out, ws_, pool_);
    EXPECT_TRUE(st.ok()) << st.ToString();
    return logits;
  }

  // Runs `chunks` (ends) from `start`, then `decode` greedy steps; appends
  // the decoded tokens to *ids and returns all logits rows in order.
  std::vector<float> Continue(int64_t slot, std::vector<int32_t>* ids, int64_t start,
                              const std::vector<int64_t>& ends, int decode) {
    std::vector<float> all;
    for (int64_t end : ends) {
      const std::vector<float> l = Run(slot, *ids, start, end);
      all.insert(all.end(), l.begin(), l.end());
      start = end;
    }
    for (int d = 0; d < decode; ++d) {
      const float* last = all.data() + all.size() - Sz(vocab());
      int32_t best = 0;
      for (int64_t v = 1; v < vocab(); ++v) {
        if (last[v] > last[best]) best = static_cast<int32_t>(v);
      }
      ids->push_back(best);
      const std::vector<float> l = Run(slot, *ids, start, start + 1);
      all.insert(all.end(), l.begin(), l.end());
      ++start;
    }
    return all;
  }

  // Bytes of the given pages in every layer's pool of every pooled group.
  std::vector<uint8_t> PageBytes(const Tables& t) const {
    std::vector<uint8_t> out;
    for (int64_t l = 0; l < cache_->num_layers(); ++l) {
      for (int g : model::kPooledGroups) {
        const model::PagedRows* rows = cache_->layer(l).history(static_cast<cache::Dsv4Group>(g));
        if (rows == nullptr) continue;
        for (int32_t page : t[Sz(g)]) {
          const auto* p = reinterpret_cast<const uint8_t*>(rows->PageData(page));
          out.insert(out.end(), p, p + rows->page_bytes());
        }
      }
    }
    return out;
  }

  static Tables Prefix(const Tables& t, int64_t tokens) {
    Tables out;
    for (int g : model::kPooledGroups) {
      out[Sz(g)].assign(t[Sz(g)].begin(), t[Sz(g)].begin() + tokens / kPageTokens);
    }
    return out;
  }
  static std::array<std::span<const int32_t>, cache::kNumDsv4Groups> Spans(const Tables& t) {
    std::array<std::span<const int32_t>, cache::kNumDsv4Groups> s;
    for (size_t g = 0; g < s.size(); ++g) s[g] = t[g];
    return s;
  }

  // The writer (slot 0) prefills prompt A in chunks ending at `boundary`,
  // snapshots, then a second prompt B = A[0, boundary) + its own tokens runs
  // restored in slot 1 (chunks `hit_ends`, then decode) and cold in slot 2
  // (one chunk, then decode): every logit row from `boundary` on is bitwise
  // equal.  Then the writer continues A and equals a cold run of A.
  void Scenario(int64_t boundary, const std::vector<int64_t>& writer_ends,
                const std::vector<int64_t>& hit_ends, int64_t b_len) {
    next_page_ = {{0, 0}, {1, 0}, {2, 8}};
    std::vector<int32_t> a = Tokens(boundary + 45, 11);
    std::vector<int32_t> b(a.begin(), a.begin() + boundary);
    const std::vector<int32_t> tail = Tokens(b_len - boundary, 12);
    b.insert(b.end(), tail.begin(), tail.end());

    std::vector<int32_t> ids_a = a;
    Continue(0, &ids_a, 0, writer_ends, 0);
    ASSERT_EQ(writer_ends.back(), boundary);
    model::SlotSnapshot snap;
    cache_->SaveSlot(0, &snap);
    ASSERT_EQ(snap.num_tokens(), boundary);
    ASSERT_EQ(snap.bytes.size(), model_->CacheFixedBytesPerSlot(Options()));
    const Tables shared = Prefix(tables_[0], boundary);
    const std::vector<uint8_t> shared_before = PageBytes(shared);

    // Restored: slot 1 gets the writer's full pages plus pages of its own
    // (ids after the writer's, so nothing else aliases).
    ASSERT_TRUE(cache_->RestoreSlot(1, snap, Spans(shared)).ok());
    tables_[1] = shared;
    // Pages after the shared ones come from slot 1's own range.
    next_page_[1] = 4 - static_cast<int32_t>(boundary / kPageTokens);
    ASSERT_EQ(cache_->NumCachedTokens(1), boundary);
    std::vector<int32_t> ids_hit = b;
    const std::vector<float> hit = Continue(1, &ids_hit, boundary, hit_ends, 4);

    std::vector<int32_t> ids_cold = b;
    const std::vector<float> cold_all = Continue(2, &ids_cold, 0, {b_len}, 4);
    const std::vector<float> cold(cold_all.begin() + static_cast<ptrdiff_t>(boundary * vocab()),
                                  cold_all.end());
    ASSERT_EQ(hit.size(), cold.size());
    EXPECT_EQ(std::memcmp(hit.data(), cold.data(), hit.size() * sizeof(float)), 0);
    EXPECT_EQ(ids_hit, ids_cold);
    EXPECT_TRUE(PageBytes(shared) == shared_before) << "the restored sequence wrote a shared page";

    // The writer goes on over its own (shared) pages: a cold run of A in
    // slot 2 gives the same logits.
    std::vector<int32_t> ids_w = a;
    const std::vector<float> w = Continue(0, &ids_w, boundary, {boundary + 45}, 2);
    cache_->Reset(2);
    tables_[2] = {};
    std::vector<int32_t> ids_wc = a;
    const std::vector<float> wc_all = Continue(2, &ids_wc, 0, {boundary + 45}, 2);
    const std::vector<float> wc(wc_all.begin() + static_cast<ptrdiff_t>(boundary * vocab()),
                                wc_all.end());
    ASSERT_EQ(w.size(), wc.size());
    EXPECT_EQ(std::memcmp(w.data(), wc.data(), w.size() * sizeof(float)), 0);
    EXPECT_TRUE(PageBytes(shared) == shared_before) << "the writer rewrote a shared page";
  }

  model::Workspace ws_;
  std::unique_ptr<model::ModelCache> cache_;
  std::map<int64_t, Tables> tables_;
  std::map<int64_t, int32_t> next_page_;
};

// Two full pages shared; the hit's prompt goes on in two chunks (crossing a
// 4-token block and the window) then decodes.
TEST_F(PrefixRestoreTest, HitAtTwoPagesEqualsColdRunBitwise) {
  Scenario(256, {100, 256}, {290, 316}, 316);
}

// One page shared, the rest fed one row at a time (chunk size 1).
TEST_F(PrefixRestoreTest, HitAtOnePageRowByRowEqualsColdRun) {
  std::vector<int64_t> ends;
  for (int64_t e = 129; e <= 150; ++e) ends.push_back(e);
  Scenario(128, {128}, ends, 150);
}

// Without the restored rolling state the continuation differs: the check
// above can fail (a fresh slot on the same pages is not a cold run).
TEST_F(PrefixRestoreTest, PagesAloneAreNotEnough) {
  next_page_ = {{0, 0}, {1, 4}, {2, 8}};
  std::vector<int32_t> a = Tokens(200, 21);
  Continue(0, &a, 0, {128}, 0);
  model::SlotSnapshot snap;
  cache_->SaveSlot(0, &snap);
  model::SlotSnapshot blank;
  cache_->SaveSlot(1, &blank);  // a fresh slot's rolling state
  blank.counts = snap.counts;   // same counts, initial rings and states
  const Tables shared = Prefix(tables_[0], 128);
  ASSERT_TRUE(cache_->RestoreSlot(1, blank, Spans(shared)).ok());
  tables_[1] = shared;
  next_page_[1] = 3;
  std::vector<int32_t> ids1 = a;
  const std::vector<float> wrong = Continue(1, &ids1, 128, {140}, 0);
  std::vector<int32_t> ids0 = a;
  const std::vector<float> right = Continue(0, &ids0, 128, {140}, 0);
  ASSERT_EQ(wrong.size(), right.size());
  EXPECT_NE(std::memcmp(wrong.data(), right.data(), right.size() * sizeof(float)), 0);
}

// Bad restores are errors that leave the slot as it was.
TEST_F(PrefixRestoreTest, BadRestoresAreErrorsThatChangeNothing) {
  next_page_ = {{0, 0}, {1, 4}, {2, 8}};
  std::vector<int32_t> a = Tokens(200, 31);
  Continue(0, &a, 0, {132}, 0);  // 33 cmp_c4 rows: the second page is partly filled
  model::SlotSnapshot partial;
  cache_->SaveSlot(0, &partial);
  Tables two = tables_[0];  // two pages per group
  Continue(1, &a, 0, {5}, 0);
  const int64_t before = cache_->NumCachedTokens(1);
  ASSERT_EQ(before, 5);

  Status st = cache_->RestoreSlot(1, partial, Spans(two));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_NE(st.message().find("must be full"), std::string::npos) << st.ToString();

  cache_->Reset(0);
  tables_[0] = {};
  Continue(0, &a, 0, {128}, 0);
  model::SlotSnapshot good;
  cache_->SaveSlot(0, &good);
  const Tables one = Prefix(tables_[0], 128);

  st = cache_->RestoreSlot(1, good, Spans(two));  // table longer than the rows
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  Tables bad_id = one;
  bad_id[cache::kGroupIdx][0] = kPoolPages;
  st = cache_->RestoreSlot(1, good, Spans(bad_id));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  model::SlotSnapshot truncated = good;
  truncated.bytes.pop_back();
  st = cache_->RestoreSlot(1, truncated, Spans(one));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  model::SlotSnapshot inconsistent = good;
  inconsistent.counts[3 * 2] += 4;  // layer 2 (CSA): tokens no longer match its rows
  st = cache_->RestoreSlot(1, inconsistent, Spans(one));
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
  EXPECT_EQ(cache_->RestoreSlot(3, good, Spans(one)).code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(cache_->NumCachedTokens(1), before);

  auto self_managed = model_->NewCache(1, Options());
  ASSERT_NE(self_managed, nullptr);
  model::SlotSnapshot small;
  self_managed->SaveSlot(0, &small);
  small.counts.assign(small.counts.size(), 0);
  st = self_managed->RestoreSlot(0, small, {});
  EXPECT_EQ(st.code(), StatusCode::kInvalidArgument) << st.ToString();
}

// The price of one snapshot on tiny-a (docs/engine.md §7.2): the per-slot
// bytes of every layer and the MTP block.
TEST_F(PrefixRestoreTest, SnapshotBytesAreThePerSlotState) {
  model::SlotSnapshot snap;
  cache_->SaveSlot(0, &snap);
  EXPECT_EQ(snap.bytes.size(), cache_->FixedBytesPerSlot());
  EXPECT_EQ(snap.counts.size(), Sz(3 * (cache_->num_layers() + 1)));
  // Window rings of 18 rows x 128 BF16 (6 layers; the MTP ring 16), CSA and indexer
  // states of 10 rows, HCA states of 130 rows x 128 FP32 (most of it).
  EXPECT_EQ(snap.bytes.size(), 379904u);
}

}  // namespace
}  // namespace dsv4
