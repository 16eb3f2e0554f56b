// The routing observer (model/expert_usage.h): marks are the union of the
// routed experts each MoE layer selected, equal to the golden trace's ids,
// exactly top_k per layer for one row (hash-routed layers included), and
// between top_k and n_routed for more rows; it changes no output.
#include "model/expert_usage.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <vector>

#include "model/model.h"
#include "tiny_model_fixture.h"

namespace dsv4 {
namespace {

TEST(LayerExpertUsage, CountsDistinctExpertsUntilCleared) {
  model::LayerExpertUsage u(8);
  const int32_t ids[] = {3, 1, 3, 7, 1};
  u.Mark(ids, 5);
  EXPECT_EQ(u.distinct(), 3);
  EXPECT_TRUE(u.touched(1) && u.touched(3) && u.touched(7));
  EXPECT_FALSE(u.touched(0));
  u.Mark(ids, 2);  // already marked
  EXPECT_EQ(u.distinct(), 3);
  u.Clear();
  EXPECT_EQ(u.distinct(), 0);
  EXPECT_FALSE(u.touched(3));
  model::ExpertUsage all(3, 8);
  all.layer(0).Mark(ids, 5);
  all.layer(2).Mark(ids, 1);
  EXPECT_EQ(all.TotalDistinct(), 4);
  all.Clear();
  EXPECT_EQ(all.TotalDistinct(), 0);
}

class ExpertUsageModelTest : public testing::TinyModelTest {
 protected:
  // Runs batch with the observer and a trace; checks every layer's marks
  // against the union of the trace's expert ids and returns the counts.
  std::vector<int64_t> RunAndCheck(const model::ForwardBatch& batch, model::ModelCache& cache) {
    const checkpoint::ModelConfig& cfg = model_->config();
    model::ExpertUsage usage(cfg.num_layers_with_mtp(), cfg.n_routed_experts);
    model::ModelTrace trace;
    std::vector<float> logits(batch.logit_rows.size() * static_cast<size_t>(cfg.vocab_size));
    model::ForwardOutputs out;
    out.logits = logits.data();
    out.expert_usage = &usage;
    EXPECT_TRUE(model_->Forward(batch, cache, out, ws_, pool_, &trace).ok());
    std::vector<int64_t> counts;
    for (int64_t l = 0; l < model_->num_layers(); ++l) {
      const std::vector<int32_t>& ids = trace.blocks[static_cast<size_t>(l)].expert_ids;
      const std::set<int32_t> want(ids.begin(), ids.end());
      const model::LayerExpertUsage& got = usage.layer(l);
      EXPECT_EQ(got.distinct(), static_cast<int64_t>(want.size())) << "layer " << l;
      for (int32_t e : want) EXPECT_TRUE(got.touched(e)) << "layer " << l << " expert " << e;
      counts.push_back(got.distinct());
    }
    EXPECT_EQ(usage.layer(model_->num_layers()).distinct(), 0);  // the MTP block did not run
    return counts;
  }
  model::Workspace ws_;
};

TEST_F(ExpertUsageModelTest, OneRowTouchesTopKPerLayerMoreRowsTheirUnion) {
  const checkpoint::ModelConfig& cfg = model_->config();
  ASSERT_GT(cfg.num_hash_layers, 0);  // hash-routed layers are covered too
  const int64_t k = cfg.num_experts_per_tok;
  const int64_t e = cfg.n_routed_experts;
  constexpr int64_t kSeqs = 4;
  auto cache = model_->NewCache(kSeqs);
  model::ForwardBatch prefill;
  for (int64_t s = 0; s < kSeqs; ++s) {
    std::vector<int32_t> ids;
    for (int64_t i = 0; i < 9; ++i) ids.push_back(static_cast<int32_t>((s * 131 + i * 37) % 1024));
    prefill.Add(s, 0, ids);
    prefill.logit_rows.push_back(prefill.num_tokens() - 1);
  }
  for (int64_t c : RunAndCheck(prefill, *cache)) {
    EXPECT_GE(c, k);
    EXPECT_LE(c, e);
  }
  model::ForwardBatch one;  // a batch-1 decode step
  one.Add(0, 9, {5});
  one.logit_rows = {0};
  for (int64_t c : RunAndCheck(one, *cache)) EXPECT_EQ(c, k);
  model::ForwardBatch three;  // sequences 1..3 decode together
  for (int64_t s = 1; s < kSeqs; ++s) {
    three.Add(s, 9, {static_cast<int32_t>(100 + s)});
    three.logit_rows.push_back(s - 1);
  }
  for (int64_t c : RunAndCheck(three, *cache)) {
    EXPECT_GE(c, k);
    EXPECT_LE(c, std::min(e, 3 * k));
  }
}

TEST_F(ExpertUsageModelTest, ObservingChangesNoOutput) {
  const checkpoint::ModelConfig& cfg = model_->config();
  auto run = [&](model::ExpertUsage* usage) {
    auto cache = model_->NewCache(1);
    model::ForwardBatch b;
    b.Add(0, 0, {3, 14, 15, 92, 65});
    b.logit_rows = {4};
    std::vector<float> logits(static_cast<size_t>(cfg.vocab_size));
    model::ForwardOutputs out;
    out.logits = logits.data();
    out.expert_usage = usage;
    EXPECT_TRUE(model_->Forward(b, *cache, out, ws_, pool_).ok());
    return logits;
  };
  model::ExpertUsage usage(cfg.num_layers_with_mtp(), cfg.n_routed_experts);
  EXPECT_EQ(run(nullptr), run(&usage));
  EXPECT_GE(usage.TotalDistinct(), model_->num_layers() * cfg.num_experts_per_tok);
}

}  // namespace
}  // namespace dsv4
