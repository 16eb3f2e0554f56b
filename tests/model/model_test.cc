// Model API contracts on tiny-a: errors are values, RunBlock composes to
// Forward, logit rows are independent, steady-state decoding does not grow
// the workspace.
#include "model/model.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <vector>

#include "testing/golden.h"

namespace dsv4 {
namespace {

class ModelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    auto m = model::Model::Load(testing::TestDataPath("golden/tiny-a"));
    ASSERT_TRUE(m.ok()) << m.status().ToString();
    model_ = std::move(m).value();
  }
  std::vector<int32_t> Ids(int64_t n) const {
    std::vector<int32_t> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i)
      v[static_cast<size_t>(i)] = static_cast<int32_t>((i * 37 + 11) % 1024);
    return v;
  }
  std::unique_ptr<model::Model> model_;
  model::Workspace ws_;
};

TEST_F(ModelTest, LoadReportsMissingDirectory) {
  auto m = model::Model::Load(testing::TestDataPath("golden/does-not-exist"));
  EXPECT_FALSE(m.ok());
}

TEST_F(ModelTest, MalformedBatchesAreRejectedWithoutTouchingTheCache) {
  auto cache = model_->NewCache(2);
  model::ForwardOutputs none;
  model::ForwardBatch bad_id;
  bad_id.Add(0, 0, {1, 2, 1024});
  EXPECT_EQ(model_->Forward(bad_id, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  model::ForwardBatch bad_slot;
  bad_slot.Add(2, 0, {1});
  EXPECT_EQ(model_->Forward(bad_slot, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  model::ForwardBatch repeated;
  repeated.Add(0, 0, {1});
  repeated.Add(0, 1, {2});
  EXPECT_EQ(model_->Forward(repeated, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  model::ForwardBatch gap;  // position 5 on an empty sequence
  gap.Add(0, 5, {1});
  EXPECT_EQ(model_->Forward(gap, *cache, none, ws_, nullptr).code(),
            StatusCode::kFailedPrecondition);
  model::ForwardBatch bad_rows;
  bad_rows.Add(0, 0, {1, 2});
  bad_rows.logit_rows = {1, 0};
  EXPECT_EQ(model_->Forward(bad_rows, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  model::ForwardBatch bad_pos;
  bad_pos.Add(0, 0, {1, 2});
  bad_pos.positions[1] = 7;
  EXPECT_EQ(model_->Forward(bad_pos, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  EXPECT_EQ(cache->NumCachedTokens(0), 0);
  EXPECT_EQ(model_->RunBlock(99, nullptr, bad_rows, *cache, nullptr, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
}

TEST_F(ModelTest, RunBlockChainEqualsForwardStreams) {
  const std::vector<int32_t> ids = Ids(40);
  const int64_t n = 40;
  const size_t elems = static_cast<size_t>(n * model_->stream_width());
  model::ForwardBatch b;
  b.Add(0, 0, ids);
  auto cache = model_->NewCache(1);
  model::ModelTrace trace;
  trace.capture_streams = true;
  std::vector<bf16> final_streams(elems);
  model::ForwardOutputs out;
  out.streams = final_streams.data();
  ASSERT_TRUE(model_->Forward(b, *cache, out, ws_, nullptr, &trace).ok());

  auto chain = model_->NewCache(1);
  std::vector<bf16> cur(elems), next(elems);
  model_->EmbedStreams(ids.data(), n, cur.data());
  for (int64_t l = 0; l < model_->num_layers(); ++l) {
    ASSERT_TRUE(model_->RunBlock(l, cur.data(), b, *chain, next.data(), ws_, nullptr).ok());
    std::swap(cur, next);
    ASSERT_EQ(std::memcmp(cur.data(), trace.layer_streams[static_cast<size_t>(l)].data(),
                          elems * sizeof(bf16)),
              0)
        << "layer " << l;
  }
  EXPECT_EQ(std::memcmp(cur.data(), final_streams.data(), elems * sizeof(bf16)), 0);
  EXPECT_EQ(chain->NumCachedTokens(0), n);
}

TEST_F(ModelTest, LogitRowSubsetEqualsAllRows) {
  const std::vector<int32_t> ids = Ids(20);
  const int64_t v = model_->config().vocab_size;
  model::ForwardBatch all;
  all.Add(0, 0, ids);
  for (int64_t r = 0; r < 20; ++r) all.logit_rows.push_back(r);
  std::vector<float> la(static_cast<size_t>(20 * v));
  auto c1 = model_->NewCache(1);
  model::ForwardOutputs o1;
  o1.logits = la.data();
  ASSERT_TRUE(model_->Forward(all, *c1, o1, ws_, nullptr).ok());
  model::ForwardBatch some = all;
  some.logit_rows = {3, 19};
  std::vector<float> ls(static_cast<size_t>(2 * v));
  auto c2 = model_->NewCache(1);
  model::ForwardOutputs o2;
  o2.logits = ls.data();
  ASSERT_TRUE(model_->Forward(some, *c2, o2, ws_, nullptr).ok());
  EXPECT_EQ(std::memcmp(ls.data(), la.data() + 3 * v, static_cast<size_t>(v) * 4), 0);
  EXPECT_EQ(std::memcmp(ls.data() + v, la.data() + 19 * v, static_cast<size_t>(v) * 4), 0);
}

// Buffers are sized by the call's shape and context, then reused: replaying
// a prefill and its decode steps on a warmed workspace allocates nothing.
// (Attention's index buffers grow with the context, so the first pass may.)
TEST_F(ModelTest, WarmWorkspaceDoesNotAllocate) {
  auto cache = model_->NewCache(1);
  std::vector<float> logits(static_cast<size_t>(model_->config().vocab_size));
  size_t bytes = 0;
  for (int pass = 0; pass < 2; ++pass) {
    cache->Reset(0);
    model::ForwardBatch pre;
    pre.Add(0, 0, Ids(30));
    model::ForwardOutputs none;
    ASSERT_TRUE(model_->Forward(pre, *cache, none, ws_, nullptr).ok());
    for (int64_t p = 30; p < 50; ++p) {
      model::ForwardBatch step;
      step.Add(0, p, {static_cast<int32_t>(p)});
      step.logit_rows = {0};
      model::ForwardOutputs out;
      out.logits = logits.data();
      ASSERT_TRUE(model_->Forward(step, *cache, out, ws_, nullptr).ok());
      if (pass == 1) {
        ASSERT_EQ(ws_.TotalBytes(), bytes) << "position " << p;
      }
    }
    bytes = ws_.TotalBytes();
  }
}

TEST_F(ModelTest, MtpNeedsItsInputs) {
  auto cache = model_->NewCache(1);
  model::ForwardBatch b;
  b.Add(0, 0, {5});
  model::ForwardOutputs none;
  EXPECT_EQ(model_->ForwardMtp(b, nullptr, *cache, none, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
  auto no_mtp =
      model::Model::Load(testing::TestDataPath("golden/tiny-a"), model::ModelOptions{false});
  ASSERT_TRUE(no_mtp.ok());
  EXPECT_FALSE((*no_mtp)->has_mtp());
}

// Draft logits (approx_logits): the MTP head with BF16 dot products.  Only
// the logits change, within a small relative error of the exact head (so the
// argmax agrees on these rows); the MTP streams are bitwise the same; the
// main forward refuses the flag.
TEST_F(ModelTest, ApproxLogitsAreForMtpDraftsOnly) {
  const int64_t vocab = model_->config().vocab_size;
  const int64_t n = 24;
  auto main_cache = model_->NewCache(1);
  model::ForwardBatch b;
  b.Add(0, 0, Ids(n + 1));
  std::vector<bf16> h(static_cast<size_t>((n + 1) * model_->stream_width()));
  model::ForwardOutputs main_out;
  main_out.streams = h.data();
  ASSERT_TRUE(model_->Forward(b, *main_cache, main_out, ws_, nullptr).ok());
  std::vector<float> logits[2];
  std::vector<bf16> streams[2];
  for (int approx = 0; approx < 2; ++approx) {
    auto cache = model_->NewCache(1);
    model::ForwardBatch mb;
    const std::vector<int32_t> ids = Ids(n + 1);
    mb.Add(0, 0, std::vector<int32_t>(ids.begin() + 1, ids.end()));
    for (int64_t r = 0; r < n; ++r) mb.logit_rows.push_back(r);
    logits[approx].resize(static_cast<size_t>(n * vocab));
    streams[approx].resize(static_cast<size_t>(n * model_->stream_width()));
    model::ForwardOutputs out{logits[approx].data(), nullptr, streams[approx].data(), approx == 1};
    ASSERT_TRUE(model_->ForwardMtp(mb, h.data(), *cache, out, ws_, nullptr).ok());
  }
  EXPECT_EQ(std::memcmp(streams[0].data(), streams[1].data(), streams[0].size() * sizeof(bf16)), 0);
  for (int64_t r = 0; r < n; ++r) {
    const float* exact = logits[0].data() + r * vocab;
    const float* approx = logits[1].data() + r * vocab;
    float scale = 0;
    for (int64_t v = 0; v < vocab; ++v) scale = std::max(scale, std::fabs(exact[v]));
    for (int64_t v = 0; v < vocab; ++v) {
      ASSERT_NEAR(approx[v], exact[v], 1e-3f * scale) << "row " << r << " token " << v;
    }
    EXPECT_EQ(std::max_element(approx, approx + vocab) - approx,
              std::max_element(exact, exact + vocab) - exact)
        << "row " << r;
  }
  model::ForwardBatch step;
  step.Add(0, n + 1, {7});
  step.logit_rows = {0};
  std::vector<float> one(static_cast<size_t>(vocab));
  model::ForwardOutputs refused{one.data(), nullptr, nullptr, true};
  EXPECT_EQ(model_->Forward(step, *main_cache, refused, ws_, nullptr).code(),
            StatusCode::kInvalidArgument);
}

}  // namespace
}  // namespace dsv4
