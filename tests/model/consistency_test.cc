// Bitwise self-consistency of the forward pass on tiny-a: the result for a
// row depends only on its sequence's tokens and position, never on how the
// work is chunked or batched (docs/model.md "Forward pass API").
#include <gtest/gtest.h>

#include <cstring>
#include <memory>
#include <random>
#include <vector>

#include "model/model.h"
#include "testing/golden.h"
#include "tiny_model_fixture.h"

namespace dsv4 {
namespace {

class ConsistencyTest : public testing::TinyModelTest {
 protected:
  static std::vector<int32_t> Tokens(int64_t n, uint32_t seed) {
    std::mt19937 rng(seed);
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (auto& t : v) t = static_cast<int32_t>(rng() % static_cast<uint32_t>(vocab()));
    return v;
  }
  static int64_t vocab() { return model_->config().vocab_size; }

  // Logits of every row of one call [rows, vocab] (and the pre-head streams).
  struct CallResult {
    std::vector<float> logits;
    std::vector<bf16> streams;
  };
  CallResult Run(const model::ForwardBatch& batch, model::ModelCache& cache) {
    model::ForwardBatch b = batch;
    b.logit_rows.clear();
    for (int64_t r = 0; r < b.num_tokens(); ++r) b.logit_rows.push_back(r);
    CallResult res;
    res.logits.resize(static_cast<size_t>(b.num_tokens() * vocab()));
    res.streams.resize(static_cast<size_t>(b.num_tokens() * model_->stream_width()));
    model::ForwardOutputs out;
    out.logits = res.logits.data();
    out.streams = res.streams.data();
    const Status s = model_->Forward(b, cache, out, ws_, pool_);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return res;
  }

  // Sequence `ids` run in chunks of `chunk` rows (slot 0, fresh cache).
  CallResult Chunked(const std::vector<int32_t>& ids, int64_t chunk) {
    auto cache = model_->NewCache(1);
    CallResult all;
    for (size_t s = 0; s < ids.size(); s += static_cast<size_t>(chunk)) {
      const size_t e = std::min(ids.size(), s + static_cast<size_t>(chunk));
      model::ForwardBatch b;
      b.Add(0, static_cast<int64_t>(s), std::vector<int32_t>(ids.begin() + s, ids.begin() + e));
      CallResult r = Run(b, *cache);
      all.logits.insert(all.logits.end(), r.logits.begin(), r.logits.end());
      all.streams.insert(all.streams.end(), r.streams.begin(), r.streams.end());
    }
    return all;
  }

  static void ExpectSameBits(const float* a, const float* b, size_t n, const char* what) {
    ASSERT_EQ(std::memcmp(a, b, n * sizeof(float)), 0) << what;
  }
  static void ExpectSameRows(const CallResult& a, size_t a_row, const CallResult& b, size_t b_row,
                             size_t rows, const char* what) {
    const auto v = static_cast<size_t>(vocab());
    const auto w = static_cast<size_t>(model_->stream_width());
    ASSERT_LE((a_row + rows) * v, a.logits.size()) << what;
    ASSERT_LE((b_row + rows) * v, b.logits.size()) << what;
    ExpectSameBits(&a.logits[a_row * v], &b.logits[b_row * v], rows * v, what);
    ASSERT_EQ(std::memcmp(&a.streams[a_row * w], &b.streams[b_row * w], rows * w * sizeof(bf16)), 0)
        << what;
  }

  model::Workspace ws_;
};

TEST_F(ConsistencyTest, ChunkedPrefillEqualsOneShot) {
  const std::vector<int32_t> ids = Tokens(300, 1);
  const CallResult whole = Chunked(ids, 300);
  for (const int64_t chunk : {1, 7, 128}) {
    const CallResult c = Chunked(ids, chunk);
    ExpectSameRows(c, 0, whole, 0, ids.size(), "chunked prefill");
  }
}

TEST_F(ConsistencyTest, PrefillEqualsFirstRowsOfLongerPrefill) {
  const std::vector<int32_t> ids = Tokens(320, 2);
  const CallResult longer = Chunked(ids, 320);
  const CallResult shorter = Chunked(std::vector<int32_t>(ids.begin(), ids.begin() + 300), 300);
  ExpectSameRows(shorter, 0, longer, 0, 300, "prefix prefill");
}

TEST_F(ConsistencyTest, DecodeStepsEqualLongerPrefill) {
  const std::vector<int32_t> ids = Tokens(320, 3);
  const CallResult longer = Chunked(ids, 320);
  auto cache = model_->NewCache(1);
  model::ForwardBatch pre;
  pre.Add(0, 0, std::vector<int32_t>(ids.begin(), ids.begin() + 300));
  Run(pre, *cache);
  for (int64_t p = 300; p < 320; ++p) {
    model::ForwardBatch step;
    step.Add(0, p, {ids[static_cast<size_t>(p)]});
    const CallResult r = Run(step, *cache);
    ExpectSameRows(r, 0, longer, static_cast<size_t>(p), 1, "decode step");
  }
}

TEST_F(ConsistencyTest, MultiTokenStepEqualsSingleSteps) {
  const std::vector<int32_t> ids = Tokens(140, 4);
  const int64_t prompt = 131;  // ends inside a ratio-4 block and crosses one
  auto single = model_->NewCache(1);
  auto multi = model_->NewCache(1);
  model::ForwardBatch pre;
  pre.Add(0, 0, std::vector<int32_t>(ids.begin(), ids.begin() + prompt));
  Run(pre, *single);
  Run(pre, *multi);
  model::ForwardBatch s_tokens;
  s_tokens.Add(0, prompt, std::vector<int32_t>(ids.begin() + prompt, ids.end()));
  const CallResult m = Run(s_tokens, *multi);
  for (int64_t p = prompt; p < static_cast<int64_t>(ids.size()); ++p) {
    model::ForwardBatch step;
    step.Add(0, p, {ids[static_cast<size_t>(p)]});
    const CallResult r = Run(step, *single);
    ExpectSameRows(r, 0, m, static_cast<size_t>(p - prompt), 1, "S-token step");
  }
}

TEST_F(ConsistencyTest, BatchOfThreeEqualsEachAlone) {
  const std::vector<int32_t> a = Tokens(37, 5), b = Tokens(150, 6), c = Tokens(9, 7);
  // Sequences at different stages: a fresh, b after a 100-token prefix, c after 260.
  const std::vector<int32_t> b_pre = Tokens(100, 8), c_pre = Tokens(260, 9);
  auto together = model_->NewCache(3);
  model::ForwardBatch warm;
  warm.Add(1, 0, b_pre);
  warm.Add(2, 0, c_pre);
  Run(warm, *together);
  model::ForwardBatch batch;
  batch.Add(0, 0, a);
  batch.Add(1, 100, b);
  batch.Add(2, 260, c);
  const CallResult all = Run(batch, *together);

  struct Alone {
    const std::vector<int32_t>* pre;
    const std::vector<int32_t>* ids;
    size_t row;
  };
  for (const Alone& s : {Alone{nullptr, &a, 0}, Alone{&b_pre, &b, a.size()},
                         Alone{&c_pre, &c, a.size() + b.size()}}) {
    auto cache = model_->NewCache(1);
    int64_t start = 0;
    if (s.pre != nullptr) {
      model::ForwardBatch p;
      p.Add(0, 0, *s.pre);
      Run(p, *cache);
      start = static_cast<int64_t>(s.pre->size());
    }
    model::ForwardBatch one;
    one.Add(0, start, *s.ids);
    const CallResult r = Run(one, *cache);
    ExpectSameRows(r, 0, all, s.row, s.ids->size(), "batched sequence");
  }
}

// Speculative rollback: a verify step that ran K wrong draft tokens and was
// then rewound must leave no trace in any layer (window ring, compressed rows,
// indexer keys, compressor states).  The prompt crosses CSA (4) and HCA (128)
// block boundaries inside the rejected region, so emitted-then-dropped entries
// are exercised.
TEST_F(ConsistencyTest, RewoundDraftsLeaveNoTrace) {
  const int64_t window = model_->config().sliding_window;
  for (int64_t k : {1, 3, 5}) {
    const std::vector<int32_t> ids = Tokens(140, 77 + static_cast<uint32_t>(k));
    const CallResult want = Chunked(ids, static_cast<int64_t>(ids.size()));
    model::CacheOptions opts;
    opts.ring_capacity = window + k;
    auto cache = model_->NewCache(1, opts);
    std::vector<float> got_logits;
    // Positions 0..125, then from 126 on: K wrong drafts after each true token,
    // rolled back, until the end.  Blocks complete at 127 (ratio 128) and at
    // every 4th position (ratio 4) inside the rejected rows.
    int64_t pos = 0;
    {
      model::ForwardBatch b;
      b.Add(0, 0, std::vector<int32_t>(ids.begin(), ids.begin() + 126));
      CallResult r = Run(b, *cache);
      got_logits = r.logits;
      pos = 126;
    }
    while (pos < static_cast<int64_t>(ids.size())) {
      std::vector<int32_t> step = {ids[static_cast<size_t>(pos)]};
      for (int64_t j = 0; j < k; ++j)
        step.push_back(static_cast<int32_t>((pos * 31 + j * 7) % vocab()));
      model::ForwardBatch verify;
      verify.Add(0, pos, step);
      CallResult r = Run(verify, *cache);
      // Only the first row is "accepted"; the K drafts are rejected.
      got_logits.insert(got_logits.end(), r.logits.begin(), r.logits.begin() + vocab());
      ++pos;
    }
    ASSERT_EQ(got_logits.size(), want.logits.size());
    ExpectSameBits(got_logits.data(), want.logits.data(), want.logits.size(),
                   "rewound drafts changed later logits");
  }
}

TEST_F(ConsistencyTest, ThreadCountDoesNotChangeBits) {
  const std::vector<int32_t> ids = Tokens(150, 11);
  const CallResult two = Chunked(ids, 150);  // the suite's 2-thread pool
  ThreadPool* saved = pool_;
  pool_ = nullptr;  // inline, single thread
  const CallResult one = Chunked(ids, 150);
  pool_ = saved;
  ExpectSameRows(one, 0, two, 0, ids.size(), "thread count");
}

TEST_F(ConsistencyTest, MtpChunkedEqualsOneShot) {
  const std::vector<int32_t> ids = Tokens(60, 10);
  const CallResult main_out = Chunked(ids, 60);
  const int64_t n = 59;  // row q: (h_q, token q+1) at position q
  const std::vector<int32_t> next(ids.begin() + 1, ids.end());
  auto run_mtp = [&](int64_t chunk) {
    auto cache = model_->NewCache(1);
    std::vector<float> logits;
    for (int64_t s = 0; s < n; s += chunk) {
      const int64_t e = std::min(n, s + chunk);
      model::ForwardBatch b;
      b.Add(0, s, std::vector<int32_t>(next.begin() + s, next.begin() + e));
      for (int64_t r = 0; r < e - s; ++r) b.logit_rows.push_back(r);
      std::vector<float> l(static_cast<size_t>((e - s) * vocab()));
      model::ForwardOutputs out;
      out.logits = l.data();
      const Status st = model_->ForwardMtp(b, main_out.streams.data() + s * model_->stream_width(),
                                           *cache, out, ws_, pool_);
      EXPECT_TRUE(st.ok()) << st.ToString();
      logits.insert(logits.end(), l.begin(), l.end());
    }
    return logits;
  };
  const std::vector<float> whole = run_mtp(n);
  for (const int64_t chunk : {1, 7}) {
    const std::vector<float> c = run_mtp(chunk);
    ASSERT_EQ(c.size(), whole.size());
    ExpectSameBits(c.data(), whole.data(), c.size(), "chunked MTP");
  }
}

}  // namespace
}  // namespace dsv4
